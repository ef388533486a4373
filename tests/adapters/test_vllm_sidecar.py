"""The vLLM sidecar (agents/adapters/vllm/sidecar.py) against the plugin's real routes on a FastAPI app (vLLM's API
server needs vLLM's CUDA build; the live server is tests of issue #45) and a real state directory: it notices a
vLLM restart (a newer epoch), reports vLLM's own map until it re-armed the controller's placement, answers a
restored controller with the running table, passes over a record it cannot read, keeps a bounded set of tables,
and waits for vLLM with back-off instead of exiting."""

from __future__ import annotations

import threading

import numpy as np
from fastapi import FastAPI
from fastapi.responses import HTMLResponse, PlainTextResponse
from fastapi.testclient import TestClient

from agents.adapters import state_dir as state
from agents.adapters.group_window import Where
from agents.adapters.vllm import sidecar as vllm_sidecar
from agents.adapters.vllm.endpoint import MoectlEndpointPlugin
from agents.adapters.vllm.sidecar import VllmSidecar
from agents.protocol import Array, DesiredState, ModelShape, Role

OLD, NEW = "1700000000000000.abc.7", "1700000100000000.abc.9"
MODEL = ModelShape(name="m", num_layers=2, num_experts=8, num_groups=1, top_k=2)
LABELS = 'model_name="m",engine="0"'
PAGE = f"vllm:num_requests_running{{{LABELS}}} 4\nvllm:num_requests_waiting{{{LABELS}}} 1\n"


def _api(directory, *, is_up=lambda: True) -> TestClient:  # noqa: ANN001
    app = FastAPI()

    @app.get("/version")
    def version():  # noqa: ANN202
        return {"version": "0.34.0"} if is_up() else HTMLResponse("<html>starting</html>")

    app.get("/metrics", response_class=PlainTextResponse)(lambda: PAGE)
    MoectlEndpointPlugin(directory, "s3cret").attach_router(app)
    return TestClient(app, headers={"Authorization": "Bearer s3cret"})


def _record(call: int, epoch: str = OLD, weight: np.ndarray | None = None, model: str = "2x8") -> dict:
    weight = np.full((2, 8), 3) if weight is None else weight
    return {"epoch": epoch, "model": model, "call": call, "at": 1.0, "weight": weight.tolist(), "current": None,
            "num_replicas": 10, "num_ranks": 2, "faults": {}, "vllm": "0.34.0"}


def _table(shift: int = 0) -> np.ndarray:
    return np.tile(np.r_[np.roll(np.arange(8), shift), [3, 3]], (2, 1))


def _sidecar(tmp_path, posted: list) -> VllmSidecar:  # noqa: ANN001
    return VllmSidecar(_api(tmp_path), MODEL, Where("ds", "vllm-0", Role.decode), posted.append, window_seconds=10)


def test_a_restart_is_noticed_and_the_controllers_placement_re_armed_for_the_new_life(tmp_path):
    """Old code: the old version kept being reported running, and `version in self.tables` never re-armed it."""
    posted: list = []
    state.write_load(tmp_path, _record(0))
    sidecar = _sidecar(tmp_path, posted)
    assert sidecar.begin()
    sidecar.on_answer(DesiredState(placement_version=3, slot_to_expert=Array.from_numpy(_table(1))))
    assert sidecar.apply_answers() == 2
    for call in (1, 2):
        state.write_load(tmp_path, _record(call))
    sidecar.close_window(1_800_000_000.0)
    assert sidecar.running.version == 3
    assert np.array_equal(sidecar.running_placement(3).slot_to_expert.to_numpy(), _table(1))  # a restored controller
    state.write_load(tmp_path, _record(0, NEW))  # vLLM restarted: its first rearrange clears the old life's
    snapshot = sidecar.close_window(1_800_000_010.0)
    assert sidecar.running.version == 0 and snapshot.placement_version == 0  # vLLM's own map again
    assert snapshot.adapter_faults == {"engine restarted": 1}  # the controller shows the group unhealthy, and why
    assert sidecar.apply_answers() == 2  # re-armed for the new life, with no new answer
    (armed,) = state.read_armed(tmp_path)
    assert (armed.version, armed.epoch, armed.from_call) == (3, NEW, 2)
    assert sidecar.apply_answers() is None  # once a life
    for call in (1, 2):
        state.write_load(tmp_path, _record(call, NEW) | {"faults": {"load not recorded": 2}})
    snapshot = sidecar.close_window(1_800_000_020.0)
    assert sidecar.running.version == 3
    assert snapshot.adapter_faults == {"plugin: load not recorded": 2}  # the plugin's, inside vLLM, since the last


def test_a_bad_record_is_passed_over_and_the_drafters_are_not_read(tmp_path):
    """Old code: a refused record kept last_call behind it: every later window was refused too."""
    posted: list = []
    state.write_load(tmp_path, _record(0))
    sidecar = _sidecar(tmp_path, posted)
    assert sidecar.begin()
    state.write_load(tmp_path, _record(1, weight=np.full((2, 8), -1)))  # not counts
    state.write_load(tmp_path, _record(1, weight=np.full((1, 8), 5), model="1x8"))  # the MTP drafter's
    assert sidecar.close_window(1_800_000_000.0) is None
    state.write_load(tmp_path, _record(2))
    state.write_load(tmp_path, _record(2, weight=np.full((1, 8), 5), model="1x8"))
    snapshot = sidecar.close_window(1_800_000_010.0)
    assert snapshot is not None and int(snapshot.expert_tokens.to_numpy().sum()) == 3 * 16
    assert list(sidecar.faults.snapshot()) == ["window not posted"]


def test_a_state_file_the_routes_cannot_read_is_reported_in_the_sidecars_window(tmp_path):
    """Old code: the routes counted a torn placements file in their own answer and the sidecar dropped it."""
    posted: list = []
    state.write_load(tmp_path, _record(0))
    sidecar = _sidecar(tmp_path, posted)
    assert sidecar.begin()
    (tmp_path / state.ARMED_FILE).write_text('[{"version": 1, "fro')  # torn, as by a writer that crashed
    snapshot = sidecar.close_window(1_800_000_000.0)
    assert snapshot.adapter_faults == {"endpoint: unreadable placements.json": 1}  # and again each read
    assert sidecar.close_window(1_800_000_010.0).adapter_faults == {"endpoint: unreadable placements.json": 1}


def test_the_tables_kept_are_bounded(tmp_path):
    """Old code: every version's table kept forever."""
    state.write_load(tmp_path, _record(0))
    sidecar = _sidecar(tmp_path, [])
    assert sidecar.begin()
    for version in range(1, 20):
        sidecar.on_answer(DesiredState(placement_version=version, slot_to_expert=Array.from_numpy(_table(version))))
        assert sidecar.apply_answers() is not None
    assert len(sidecar.tables) == vllm_sidecar.MAX_TABLES and max(sidecar.tables) == 19


def test_run_waits_for_vllm_with_back_off_instead_of_exiting(tmp_path, monkeypatch):
    """Old code: `begin` raised out of run() while vLLM loaded (a crash loop), and on a 200 with an HTML page."""
    monkeypatch.setattr(vllm_sidecar, "MAX_BEGIN_WAIT_SECONDS", 0.2)
    answers = iter([False, False, True])
    up = {"now": False}
    sidecar = VllmSidecar(_api(tmp_path, is_up=lambda: up["now"] or next(answers, True)), MODEL,
                          Where("ds", "vllm-0", Role.decode), [].append, window_seconds=3600)
    stopping = threading.Event()
    thread = threading.Thread(target=sidecar.run, args=(stopping,))
    thread.start()
    try:
        for _ in range(100):  # vLLM up, but not rearranged yet: still waiting
            if getattr(sidecar, "version", None):
                break
            stopping.wait(0.05)
        state.write_load(tmp_path, _record(0))
        for _ in range(100):
            if sidecar.position is not None:
                break
            stopping.wait(0.05)
    finally:
        stopping.set()
        thread.join(10)
    assert not thread.is_alive() and sidecar.position == (OLD, 0)
    assert sidecar.faults.snapshot()["engine not answering"] >= 2


def test_the_windows_rearranges_are_counted_with_the_seconds_the_policy_took(tmp_path):
    """What the controller's watchdog and change cost read (controlplane/plan/balancer_watch.py, change_cost.py)."""
    posted: list = []
    state.write_load(tmp_path, _record(0))
    sidecar = _sidecar(tmp_path, posted)
    assert sidecar.begin()
    for call in (1, 2):
        state.write_load(tmp_path, _record(call) | {"previous_seconds": 0.25})
    snapshot = sidecar.close_window(1_800_000_000.0)
    rank0 = snapshot.ranks[0]
    assert rank0.balancer_events == 2 and rank0.balancer_stall_seconds == 0.5
    quiet = sidecar.close_window(1_800_000_010.0)  # no rearrange: counted as none, not unknown
    assert quiet.ranks[0].balancer_events == 0 and quiet.ranks[0].balancer_stall_seconds is None
    assert all(r.balancer_events is None for r in quiet.ranks[1:])  # one row of the group says it
