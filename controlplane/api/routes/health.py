"""Liveness, readiness, the controller's /metrics, and the web dashboard's files (dashboards/web).

None of these takes a connection from the request pool or a thread from the request thread pool: when
requests queue on a locked or unreachable database, health still answers at once and tells why.
"""

from __future__ import annotations

from pathlib import Path

import anyio
from fastapi import APIRouter, HTTPException, Request, Response
from fastapi.responses import FileResponse, JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from controlplane.api.errors import RETRY_AFTER
from controlplane.store.db import is_ready

router = APIRouter(tags=["health"])
WEB_DIR = Path(__file__).resolve().parents[3] / "dashboards" / "web"


@router.get("/healthz")
async def healthz(request: Request) -> JSONResponse:
    """Liveness: 503 when the reconcile loop (if this process runs one) is stalled or has ended. A loop
    whose passes fail because the database is down is alive (its failures are shown): see /readyz."""
    liveness = request.app.state.liveness
    if liveness is None:
        return JSONResponse({"status": "ok", "loop": None})
    is_alive, loop = liveness.report()
    return JSONResponse({"status": "ok" if is_alive else "unhealthy", "loop": loop}, status_code=200 if is_alive
                        else 503)


@router.get("/readyz")
async def readyz(request: Request) -> JSONResponse:
    """Readiness: 503 while the database does not answer (a short-timeout read on a connection of its own)."""
    state = request.app.state
    problem = await anyio.to_thread.run_sync(is_ready, state.probe_engine, limiter=state.probe_threads)
    if problem is None:
        return JSONResponse({"status": "ok", "database": "ok"})
    return JSONResponse({"status": "unavailable", "database": problem}, status_code=503,
                        headers={"Retry-After": RETRY_AFTER})


@router.get("/metrics", include_in_schema=False)  # Prometheus exposition text, not part of the JSON API
async def metrics(request: Request) -> Response:
    return Response(generate_latest(request.app.state.metrics.registry), media_type=CONTENT_TYPE_LATEST)


@router.get("/", include_in_schema=False)
def status_page() -> FileResponse:
    return _static("index.html")


@router.get("/web/{name:path}", include_in_schema=False)
def static_file(name: str) -> FileResponse:
    return _static(name)


def _static(name: str) -> FileResponse:
    if "\x00" in name:  # no file has one, and the OS refuses to look one up
        raise HTTPException(404, "no such page: a path cannot hold a NUL byte")
    # subfolders (vendor/) are served too, but nothing outside WEB_DIR: resolve() follows `..` and links
    path = (WEB_DIR / name).resolve()
    if not path.is_relative_to(WEB_DIR) or path == WEB_DIR or not path.is_file():
        raise HTTPException(404, f"no such page: {name}")
    # no-cache: the browser revalidates (ETag) so a new release's modules are never mixed with old ones
    return FileResponse(path, headers={"Cache-Control": "no-cache"})
