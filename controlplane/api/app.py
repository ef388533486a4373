"""The FastAPI app factory: everything it needs is passed in, nothing is read at import time."""

from __future__ import annotations

import time
from collections.abc import Callable

import anyio
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from prometheus_client import CollectorRegistry
from sqlalchemy import event
from sqlalchemy.exc import DBAPIError
from sqlalchemy.exc import TimeoutError as PoolTimeout
from sqlalchemy.orm import Session, sessionmaker

from controlplane.actuate.fence import NotLeader
from controlplane.api.actuation import Actuation
from controlplane.api.body_limit import BodyLimit
from controlplane.api.count_snapshots import CountSnapshots
from controlplane.api.deadline import Arrivals, Overloaded, StampArrival
from controlplane.api.errors import ERROR_RESPONSES, RETRY_AFTER
from controlplane.api.routes import (
    actions,
    agents,
    alert_events,
    alerts,
    deployments,
    health,
    policies,
    pool_sizes,
    removals,
    tokens,
    whoami,
)
from controlplane.config import Settings
from controlplane.loop.liveness import LoopLiveness
from controlplane.loop.reconcile import Reconciler
from controlplane.loop.telemetry import ControllerMetrics
from controlplane.store.db import is_unavailable, make_probe_engine


def create_app(settings: Settings, sessions: sessionmaker[Session], *, clock: Callable[[], float] = time.time,
               metrics: ControllerMetrics | None = None, actuation: Actuation | None = None,
               liveness: LoopLiveness | None = None) -> FastAPI:
    """actuation: the reconcile a request runs, with the pool scaler and the leadership (default: no scaler, the
    only writer). liveness: the
    reconcile loop's, when this process runs one (/healthz reports it)."""
    metrics = metrics or ControllerMetrics(CollectorRegistry())
    app = FastAPI(title="moectl controller", version="0.1.0",
                  description="Observability and autotuning control plane for MoE serving")
    app.state.settings, app.state.sessions, app.state.clock, app.state.metrics = settings, sessions, clock, metrics
    app.state.actuation = actuation or Actuation(Reconciler(settings))
    app.state.liveness = liveness
    # readiness: its own connections and threads, never queued behind requests waiting for the database
    app.state.probe_engine = make_probe_engine(settings.database_url, timeout_seconds=settings.db_timeout_seconds)
    app.state.probe_threads = anyio.CapacityLimiter(2)
    app.add_middleware(BodyLimit, max_bytes=settings.max_body_bytes)
    app.add_middleware(CountSnapshots, metrics=metrics)
    arrivals = Arrivals(max_wait_seconds=settings.db_timeout_seconds)
    event.listen(sessions, "after_begin", arrivals.refuse_if_late)

    @app.exception_handler(DBAPIError)
    @app.exception_handler(PoolTimeout)
    async def _unavailable(request: Request, exc: Exception) -> JSONResponse:
        if isinstance(exc, DBAPIError) and not is_unavailable(exc):
            raise exc  # a bug, not the database's state: a 500
        # locked, overloaded or unreachable: nothing was stored (the transaction rolled back); try again soon
        detail = ("the database is busy or unreachable; nothing was stored, retry after the Retry-After seconds ("
                  f"{type(exc).__name__})")
        return JSONResponse(status_code=503, content={"detail": detail}, headers={"Retry-After": RETRY_AFTER})

    @app.exception_handler(Overloaded)
    async def _overloaded(request: Request, exc: Overloaded) -> JSONResponse:
        return JSONResponse(status_code=503, content={"detail": str(exc)}, headers={"Retry-After": RETRY_AFTER})

    @app.exception_handler(NotLeader)
    async def _not_leader(request: Request, exc: NotLeader) -> JSONResponse:
        return JSONResponse(status_code=503, headers={"Retry-After": RETRY_AFTER}, content={
            "detail": f"this replica lost the leadership during the request and wrote nothing ({exc}); retry"})

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        # one readable line per problem, naming the field, beside pydantic's structured list
        problems = [f"{'.'.join(str(p) for p in e['loc'] if p != 'body')}: {e['msg']}" for e in exc.errors()]
        if request.url.path.endswith("/snapshot"):
            metrics.snapshots.labels("422").inc()
        return JSONResponse(status_code=422, content={"detail": "; ".join(problems),
                                                      "errors": _jsonable(exc.errors())})

    for module in (health, agents, deployments, removals, policies, actions, pool_sizes, alerts, alert_events, tokens,
                   whoami):
        app.include_router(module.router, responses=ERROR_RESPONSES)
    app.add_middleware(StampArrival, arrivals=arrivals)  # outermost: the wait for a worker thread counts
    return app


def _jsonable(errors: list[dict]) -> list[dict]:
    return [{"loc": list(e["loc"]), "msg": e["msg"], "type": e["type"]} for e in errors]
