"""The `vllm.endpoint_plugins` routes (agents/adapters/vllm/endpoint.py) on a FastAPI app, as vLLM attaches them:
records served, placements armed for the rearrange after next, refused with the field named when they would drop
an expert, and only with the token."""

from __future__ import annotations

import numpy as np
from fastapi import FastAPI
from fastapi.testclient import TestClient

from agents.adapters import state_dir as state
from agents.adapters.vllm.endpoint import MoectlEndpointPlugin

TOKEN = {"Authorization": "Bearer s3cret"}
EPOCH = "1700000000000000.abc.7"


def _client(tmp_path, token: str = "s3cret") -> TestClient:
    app = FastAPI()
    MoectlEndpointPlugin(tmp_path, token).attach_router(app)
    return TestClient(app)


def _record(call: int) -> dict:
    return {"epoch": EPOCH, "model": "2x8", "call": call, "at": 1.0, "weight": np.ones((2, 8), dtype=int).tolist(),
            "current": None, "num_replicas": 10, "num_ranks": 2, "vllm": "0.34.0"}


def test_serves_records_after_a_call_and_arms_a_placement_two_rearranges_ahead(tmp_path):
    client = _client(tmp_path)
    for call in range(3):
        state.write_load(tmp_path, _record(call))
    assert [r["call"] for r in client.get("/moectl/v1/load", params={"after_epoch": EPOCH, "after": 0},
                                   headers=TOKEN).json()["records"]] \
        == [1, 2]
    table = np.tile(np.r_[np.arange(8), [3, 3]], (2, 1))
    answer = client.post("/moectl/v1/placement", json={"version": 5, "physical_to_logical_map": table.tolist()},
                         headers=TOKEN)
    assert answer.status_code == 200 and answer.json() == {"version": 5, "from_call": 4, "epoch": EPOCH, "model": "2x8"}
    (armed,) = state.read_armed(tmp_path)
    assert armed.version == 5 and np.array_equal(armed.table, table)


def test_a_placement_that_drops_an_expert_is_refused_and_nothing_armed(tmp_path):
    client = _client(tmp_path)
    state.write_load(tmp_path, _record(0))
    table = np.tile(np.r_[np.arange(7), [3, 3, 3]], (2, 1))
    answer = client.post("/moectl/v1/placement", json={"version": 5, "physical_to_logical_map": table.tolist()},
                         headers=TOKEN)
    assert answer.status_code == 422
    assert "vllm 0.34.0: physical_to_logical_map" in answer.json()["detail"] and "[7]" in answer.json()["detail"]
    assert state.read_armed(tmp_path) == []


def test_no_placement_before_a_rearrange_nor_without_the_token(tmp_path):
    body = {"version": 1, "physical_to_logical_map": [[0]]}
    assert _client(tmp_path).post("/moectl/v1/placement", json=body, headers=TOKEN).status_code == 409
    assert _client(tmp_path).post("/moectl/v1/placement", json=body).status_code == 401
    assert _client(tmp_path, token="").post("/moectl/v1/placement", json=body).status_code == 403
