"""Liveness, the controller's /metrics, and the web dashboard's files (dashboards/web)."""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter, HTTPException, Request, Response
from fastapi.responses import FileResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from sqlalchemy import text

from controlplane.api.deps import SessionDep

router = APIRouter(tags=["health"])
WEB_DIR = Path(__file__).resolve().parents[3] / "dashboards" / "web"


@router.get("/healthz")
def healthz(session: SessionDep) -> dict:
    session.execute(text("SELECT 1"))
    return {"status": "ok"}


@router.get("/metrics", include_in_schema=False)  # Prometheus exposition text, not part of the JSON API
def metrics(request: Request) -> Response:
    return Response(generate_latest(request.app.state.metrics.registry), media_type=CONTENT_TYPE_LATEST)


@router.get("/", include_in_schema=False)
def status_page() -> FileResponse:
    return _static("index.html")


@router.get("/web/{name:path}", include_in_schema=False)
def static_file(name: str) -> FileResponse:
    return _static(name)


def _static(name: str) -> FileResponse:
    # subfolders (vendor/) are served too, but nothing outside WEB_DIR: resolve() follows `..` and links
    path = (WEB_DIR / name).resolve()
    if not path.is_relative_to(WEB_DIR) or path == WEB_DIR or not path.is_file():
        raise HTTPException(404, f"no such page: {name}")
    # no-cache: the browser revalidates (ETag) so a new release's modules are never mixed with old ones
    return FileResponse(path, headers={"Cache-Control": "no-cache"})
