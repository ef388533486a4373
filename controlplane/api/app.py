"""The FastAPI app factory: everything it needs is passed in, nothing is read at import time."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from contextlib import asynccontextmanager

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from prometheus_client import CollectorRegistry
from sqlalchemy.orm import Session, sessionmaker

from controlplane import reconcile
from controlplane.api.body_limit import BodyLimit
from controlplane.api.routes import agents, deployments, health
from controlplane.config import Settings
from controlplane.telemetry import ControllerMetrics


def create_app(settings: Settings, sessions: sessionmaker[Session], *, clock: Callable[[], float] = time.time,
               registry: CollectorRegistry | None = None, run_loop: bool = False) -> FastAPI:
    """run_loop: also run the reconcile loop in a background thread for the app's lifetime."""
    metrics = ControllerMetrics(registry or CollectorRegistry())

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        stop = threading.Event()
        thread = None
        if run_loop:
            thread = threading.Thread(
                target=reconcile.run_forever, name="reconcile", daemon=True,
                kwargs=dict(sessions=sessions, settings=settings, stop=stop, clock=clock,
                            on_pass=lambda r: metrics.observe_pass(r.plans, r.num_errors, r.seconds)))
            thread.start()
        yield
        stop.set()
        if thread is not None:
            thread.join(timeout=10)

    app = FastAPI(title="moectl controller", version="0.1.0", lifespan=lifespan,
                  description="Observability and autotuning control plane for MoE serving")
    app.state.settings, app.state.sessions, app.state.clock, app.state.metrics = settings, sessions, clock, metrics
    app.add_middleware(BodyLimit, max_bytes=settings.max_body_bytes)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        # one readable line per problem, naming the field, beside pydantic's structured list
        problems = [f"{'.'.join(str(p) for p in e['loc'] if p != 'body')}: {e['msg']}" for e in exc.errors()]
        if request.url.path.endswith("/snapshot"):
            metrics.snapshots.labels("422").inc()
        return JSONResponse(status_code=422, content={"detail": "; ".join(problems),
                                                      "errors": _jsonable(exc.errors())})

    @app.middleware("http")
    async def _count_snapshots(request: Request, call_next):
        response = await call_next(request)
        if request.url.path.endswith("/snapshot") and response.status_code != 422:
            metrics.snapshots.labels(str(response.status_code)).inc()
        return response

    for module in (health, agents, deployments):
        app.include_router(module.router)
    return app


def _jsonable(errors: list[dict]) -> list[dict]:
    return [{"loc": list(e["loc"]), "msg": e["msg"], "type": e["type"]} for e in errors]
