"""The `vllm.endpoint_plugins` entry point: two routes on vLLM's API server (opt-in: `VLLM_PLUGINS=moectl`).

- GET  /moectl/v1/load?after=N: the policy's records of rearranges after call N (state.py), oldest first.
- POST /moectl/v1/placement {"version": int, "physical_to_logical_map": [[int]]}: a placement armed for the
  rearrange after next (arming.py). Refused (422, nothing written) unless it fits the newest record's shape and
  keeps every expert; 409 before vLLM recorded any rearrange (no shape to check against).
Both ask for `Authorization: Bearer $MOECTL_VLLM_TOKEN`; without that variable set, POST is refused (403).
"""

from __future__ import annotations

import hmac
import os
from pathlib import Path

import numpy as np
from fastapi import APIRouter, FastAPI, Header, HTTPException
from pydantic import BaseModel, Field

from agents.adapters import state_dir as state
from agents.adapters.arming import ArmedPlacement, arm_call
from agents.adapters.coverage import check_covers_every_expert
from agents.adapters.errors import PlacementRefused
from agents.adapters.vllm import names


class PlacementBody(BaseModel):
    version: int = Field(ge=1, le=2**31 - 1)
    physical_to_logical_map: list[list[int]] = Field(min_length=1, max_length=4096)


def _authorize(authorization: str | None, token: str, *, is_write: bool) -> None:
    if not token:
        if is_write:
            raise HTTPException(403, f"set {names.TOKEN_ENV} in vLLM's environment to accept placements")
        return
    if not authorization or not hmac.compare_digest(authorization, f"Bearer {token}"):
        raise HTTPException(401, "bearer token required")


def make_router(state_dir: Path, token: str) -> APIRouter:
    router = APIRouter()

    @router.get(names.LOAD_PATH)
    def load(after: int = -1, authorization: str | None = Header(default=None)) -> dict:
        _authorize(authorization, token, is_write=False)
        return {"records": state.read_loads(state_dir, after), "armed": [
            {"version": a.version, "from_call": a.from_call} for a in state.read_armed(state_dir)]}

    @router.post(names.PLACEMENT_PATH)
    def placement(body: PlacementBody, authorization: str | None = Header(default=None)) -> dict:
        _authorize(authorization, token, is_write=True)
        records = state.read_loads(state_dir)
        if not records:
            raise HTTPException(409, "vLLM has not rearranged yet: no shape to check the placement against")
        newest = records[-1]
        num_layers, num_experts = np.shape(newest["weight"])
        try:
            table = check_covers_every_expert(np.asarray(body.physical_to_logical_map), num_experts,
                                              newest["num_replicas"])
            if table.shape[0] != num_layers:
                raise PlacementRefused(f"placement has {table.shape[0]} layers; vLLM has {num_layers} MoE layers")
        except PlacementRefused as exc:
            raise HTTPException(422, f"vllm {newest.get('vllm', '')}: physical_to_logical_map: {exc}") from None
        armed = [a for a in state.read_armed(state_dir) if a.version != body.version]
        entry = ArmedPlacement(body.version, arm_call(newest["call"]), table)
        state.write_armed(state_dir, [*armed, entry])
        return {"version": entry.version, "from_call": entry.from_call}

    return router


class MoectlEndpointPlugin:
    """What vLLM's EndpointPlugin protocol asks (vllm/plugins/endpoint_plugins/interface.py)."""

    name = "moectl"
    required_tasks = None

    def __init__(self, state_dir: Path | None = None, token: str | None = None):
        self.state_dir = state_dir or Path(os.environ.get(names.STATE_DIR_ENV, "/tmp/moectl-vllm"))
        self.token = os.environ.get(names.TOKEN_ENV, "") if token is None else token

    def attach_router(self, app: FastAPI) -> None:
        app.include_router(make_router(self.state_dir, self.token))

    async def init_state(self, engine_client, state, args) -> None:  # noqa: ANN001 (vLLM's types)
        """Nothing to set up: the routes read and write the shared directory, never the engine."""
