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


def test_the_token_is_checked_before_the_body_is_read(tmp_path):
    """Old code: the body was parsed first: a malformed body without a token got 422, a huge one was read whole."""
    client = _client(tmp_path)
    assert client.post("/moectl/v1/placement", content=b"{not json").status_code == 401
    chunks_read = []

    def body():  # streamed: with no token, no chunk may be pulled
        for _ in range(1000):
            chunks_read.append(1)
            yield b"x" * 65536

    assert client.post("/moectl/v1/placement", content=body()).status_code == 401
    assert len(chunks_read) <= 1  # the client may hand the first chunk before the answer; never the body


def test_a_body_past_the_bound_is_refused_413(tmp_path, monkeypatch):
    from agents.adapters.vllm import endpoint

    monkeypatch.setattr(endpoint, "MAX_BODY_BYTES", 1000)
    client = _client(tmp_path)
    big = {"version": 1, "physical_to_logical_map": [[0] * 600]}
    assert client.post("/moectl/v1/placement", json=big, headers=TOKEN).status_code == 413
    streamed = client.post("/moectl/v1/placement", content=(b"[" * 100 for _ in range(20)), headers=TOKEN)
    assert streamed.status_code == 413  # no Content-Length: counted as it comes


def test_a_non_ascii_authorization_is_401_not_500(tmp_path):
    client = _client(tmp_path)
    for path, call in (("/moectl/v1/placement", client.post), ("/moectl/v1/load", client.get)):
        assert call(path, headers={"Authorization": "Bearer s3crét".encode("latin-1")}).status_code == 401


def test_a_ragged_map_is_422_naming_it(tmp_path):
    client = _client(tmp_path)
    state.write_load(tmp_path, _record(0))
    answer = client.post("/moectl/v1/placement", json={"version": 2, "physical_to_logical_map": [[0] * 10, [0]]},
                         headers=TOKEN)
    assert answer.status_code == 422 and "ragged" in answer.json()["detail"]


def test_get_load_reads_only_the_records_it_returns(tmp_path, monkeypatch):
    """Old code: every kept record (~10 MB at DeepSeek-V3 shapes) was parsed on every GET."""
    from agents.adapters import private_files

    for call in range(20):
        state.write_load(tmp_path, _record(call))
    read = []
    real = private_files.read_ours
    monkeypatch.setattr(state, "read_ours", lambda path, *a: read.append(path.name) or real(path, *a))
    answer = _client(tmp_path).get("/moectl/v1/load", params={"after_epoch": EPOCH, "after": 17}, headers=TOKEN)
    assert [r["call"] for r in answer.json()["records"]] == [18, 19]
    assert sorted(n for n in read if n.startswith("load-")) == [f"load-{EPOCH}-2x8-{c:08d}.json" for c in (18, 19)]


def test_with_a_drafter_a_placement_is_checked_against_the_main_model(tmp_path):
    """Old code: the newest record was the MTP drafter's (1 layer): every placement refused ('4 layers; vLLM has 1')."""
    client = _client(tmp_path)
    state.write_load(tmp_path, _record(0))
    state.write_load(tmp_path, _record(0) | {"model": "1x8", "weight": np.ones((1, 8), dtype=int).tolist()})
    table = np.tile(np.r_[np.arange(8), [3, 3]], (2, 1))
    answer = client.post("/moectl/v1/placement", json={"version": 5, "physical_to_logical_map": table.tolist()},
                         headers=TOKEN)
    assert answer.status_code == 200 and answer.json()["model"] == "2x8"
    (armed,) = state.read_armed(tmp_path)
    assert armed.model == "2x8" and armed.epoch == EPOCH


def test_an_unwritable_directory_is_503_not_500(tmp_path):
    directory = tmp_path / "state"
    state.write_load(directory, _record(0))
    client = _client(directory)
    (directory / "placements.json").mkdir()  # os.replace cannot put a file over a directory
    table = np.tile(np.r_[np.arange(8), [3, 3]], (2, 1))
    answer = client.post("/moectl/v1/placement", json={"version": 5, "physical_to_logical_map": table.tolist()},
                         headers=TOKEN)
    assert answer.status_code == 503 and "cannot be written" in answer.json()["detail"]
