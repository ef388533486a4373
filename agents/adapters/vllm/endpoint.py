"""The `vllm.endpoint_plugins` entry point: two routes on vLLM's API server (opt-in: `VLLM_PLUGINS=moectl`).

- GET  /moectl/v1/load?after_epoch=E&after=N&model=M&limit=K: the policy's records after call N of the engine's
  life E (state_dir.py; none given: all), of model M (none: every model), the newest K (<= MAX_LOADS) of them,
  oldest first. Only those files are read. With them the armed placements ({version, from_call, epoch, model}) and
  the endpoint's own faults.
- POST /moectl/v1/placement {"version": int, "physical_to_logical_map": [[int]], "model": str?}: a placement armed
  for the rearrange after next (arming.py) of the engine's current life, for the model of its layer count (or
  `model`). Refused (422, nothing written) unless it is a rectangle that fits the newest record's shape and keeps
  every expert; 409 before vLLM recorded any rearrange (no shape to check against).
Both ask for `Authorization: Bearer $MOECTL_VLLM_TOKEN`, checked before a byte of the body is read; a body past
MAX_BODY_BYTES is refused (413) unread. Without that variable set, POST is refused (403).
"""

from __future__ import annotations

import hmac
import json
import logging
import os
from pathlib import Path

import numpy as np
from fastapi import APIRouter, FastAPI, HTTPException, Query, Request
from pydantic import BaseModel, Field, ValidationError
from starlette.concurrency import run_in_threadpool

from agents.adapters import state_dir as state
from agents.adapters.arming import ArmedPlacement, arm_call
from agents.adapters.coverage import check_covers_every_expert
from agents.adapters.errors import PlacementRefused
from agents.adapters.faults import Faults
from agents.adapters.vllm import names
from agents.adapters.vllm.count_route import make_counts_router
from agents.adapters.vllm.policy import state_dir_from_env

log = logging.getLogger("moectl.adapter.vllm.endpoint")
MAX_BODY_BYTES = 16 << 20  # a [61, 4096] map of 3-digit ids is ~1 MB


class PlacementBody(BaseModel):
    version: int = Field(ge=1, le=2**31 - 1)
    physical_to_logical_map: list[list[int]] = Field(min_length=1, max_length=4096)
    model: str | None = Field(default=None, max_length=32)


def _authorize(authorization: str | None, token: str, *, is_write: bool) -> None:
    if not token:
        if is_write:
            raise HTTPException(403, f"set {names.TOKEN_ENV} in vLLM's environment to accept placements")
        return
    # Starlette hands headers decoded as latin-1: compare bytes, so a non-ASCII header is a 401, not a TypeError
    given = (authorization or "").encode("utf-8", "surrogateescape")
    if not hmac.compare_digest(given, f"Bearer {token}".encode()):
        raise HTTPException(401, "bearer token required")


async def _bounded_body(request: Request) -> bytes:
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > MAX_BODY_BYTES:
        raise HTTPException(413, f"body of {declared} bytes; at most {MAX_BODY_BYTES}")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > MAX_BODY_BYTES:
            raise HTTPException(413, f"body past {MAX_BODY_BYTES} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


def _parse(raw: bytes) -> PlacementBody:
    try:
        body = PlacementBody.model_validate(json.loads(raw))
    except (ValueError, ValidationError) as exc:  # JSONDecodeError is a ValueError
        raise HTTPException(422, f"placement body: {str(exc)[:500]}") from None
    widths = {len(row) for row in body.physical_to_logical_map}
    if len(widths) != 1:
        raise HTTPException(422, f"physical_to_logical_map is ragged: rows of {sorted(widths)[:8]} slots")
    return body


def arm_placement(state_dir: Path, body: PlacementBody, faults: Faults) -> dict:
    """Checks `body` against the newest records and arms it (file I/O: run in a worker thread)."""
    newest = state.read_newest(state_dir, faults=faults)
    if not newest:
        raise HTTPException(409, "vLLM has not rearranged yet: no shape to check the placement against")
    num_rows = len(body.physical_to_logical_map)
    models = [body.model] if body.model else [m for m, r in newest.items() if len(r["weight"]) == num_rows]
    record = newest.get(models[0]) if models else None
    if record is None:
        shapes = {m: len(r["weight"]) for m, r in newest.items()}
        raise HTTPException(422, f"vllm: physical_to_logical_map has {num_rows} layers; vLLM's models (model: "
                                 f"MoE layers) are {shapes}")
    num_layers, num_experts = np.shape(record["weight"])
    try:
        table = check_covers_every_expert(np.asarray(body.physical_to_logical_map), num_experts,
                                          int(record["num_replicas"]))
        if table.shape[0] != num_layers:
            raise PlacementRefused(f"placement has {table.shape[0]} layers; vLLM has {num_layers} MoE layers")
    except PlacementRefused as exc:
        raise HTTPException(422, f"vllm {record.get('vllm', '')}: physical_to_logical_map: {exc}") from None
    entry = ArmedPlacement(body.version, arm_call(record["call"]), table, record["epoch"], record["model"])
    try:
        state.arm(state_dir, entry)
    except OSError as exc:
        faults.record("placement not armed", exc)
        raise HTTPException(503, f"the state directory cannot be written: {exc}") from None
    return {"version": entry.version, "from_call": entry.from_call, "epoch": entry.epoch, "model": entry.model}


def make_router(state_dir: Path, token: str, faults: Faults | None = None) -> APIRouter:
    router = APIRouter()
    faults = faults or Faults(log)

    @router.get(names.LOAD_PATH)
    def load(request: Request, after: int = -1, after_epoch: str | None = Query(default=None, max_length=64),
             model: str | None = Query(default=None, max_length=32),
             limit: int = Query(default=state.MAX_LOADS, ge=1, le=state.MAX_LOADS)) -> dict:
        _authorize(request.headers.get("authorization"), token, is_write=False)
        position = None if after_epoch is None else (after_epoch, after)
        records = state.read_loads(state_dir, position, model=model, max_records=limit, faults=faults)
        armed = [{"version": a.version, "from_call": a.from_call, "epoch": a.epoch, "model": a.model}
                 for a in state.read_armed(state_dir, faults=faults)]
        return {"records": records, "armed": armed, "faults": faults.snapshot()}

    @router.post(names.PLACEMENT_PATH)
    async def placement(request: Request) -> dict:
        _authorize(request.headers.get("authorization"), token, is_write=True)
        body = _parse(await _bounded_body(request))
        return await run_in_threadpool(arm_placement, state_dir, body, faults)

    return router


class MoectlEndpointPlugin:
    """What vLLM's EndpointPlugin protocol asks (vllm/plugins/endpoint_plugins/interface.py)."""

    name = "moectl"
    required_tasks = None

    def __init__(self, state_dir: Path | None = None, token: str | None = None):
        self.state_dir = state_dir or state_dir_from_env()
        self.token = os.environ.get(names.TOKEN_ENV, "") if token is None else token

    def attach_router(self, app: FastAPI) -> None:
        app.include_router(make_router(self.state_dir, self.token))
        app.include_router(make_counts_router(
            self.state_dir, lambda authorization: _authorize(authorization, self.token, is_write=False)))

    async def init_state(self, engine_client, state, args) -> None:  # noqa: ANN001 (vLLM's types)
        """Nothing to set up: the routes read and write the shared directory, never the engine."""
