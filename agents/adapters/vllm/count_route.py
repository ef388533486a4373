"""GET /moectl/v1/expert-counts on vLLM's API server: every worker's newest cumulative per-expert counts
(state_dir.read_counts; written by window_handoff.py), for the sidecar. Same bearer token as the other routes."""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter, Header

from agents.adapters import state_dir as state
from agents.adapters.vllm import names


def make_counts_router(state_dir: Path, authorize) -> APIRouter:  # noqa: ANN001 (endpoint._authorize bound)
    router = APIRouter()

    @router.get(names.COUNTS_PATH)
    def counts(authorization: str | None = Header(default=None)) -> dict:
        authorize(authorization)
        return {"workers": state.read_counts(state_dir)}

    return router
