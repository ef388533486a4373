"""The SGLang sidecar's loop decisions (agents/adapters/sglang/sidecar.py): nothing posted from a malformed dump,
nothing written from a placement that drops an expert, one restart per min_restart_seconds, the version a server
runs read from when it started, and a restarted server's recorder started again. SGLang's own dumps and loader are
in test_sglang_dump.py, test_sglang_location_file.py and the closed loop; here the dumps are written in their
format (torch.save of the keys names.py pins) to drive the loop quickly."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from support.clock import Clock
from support.engines.pages import sglang_page
from support.engines.recorded_sglang import RecordedSGLang
from support.engines.sidecar_loop import Restarts

from agents.adapters import state_dir
from agents.adapters.group_window import Where
from agents.adapters.sglang.location_file import location_file
from agents.adapters.sglang.model import deepseek_model
from agents.adapters.sglang.placement_store import DirectoryStore, StoredPlacement
from agents.adapters.sglang.server_check import ServerRefused
from agents.adapters.sglang.sidecar import Sidecar
from agents.protocol import Array, DesiredState, Role

CONFIG = {"n_routed_experts": 16, "num_hidden_layers": 5, "first_k_dense_replace": 1, "n_group": 4, "topk_group": 2,
          "num_experts_per_tok": 2}
MODEL = deepseek_model(CONFIG, name="small")
INFO = {"version": "0.5.23", "enable_eplb": False, "expert_distribution_recorder_mode": "stat",
        "expert_distribution_recorder_buffer_size": 64, "ep_size": 4, "ep_num_redundant_experts": 4}


def _dumps(tmp_path, buffers: list[np.ndarray]) -> list:
    paths = []
    for i, buffer in enumerate(buffers):
        path = tmp_path / f"made-{i}.pt"
        torch.save({"rank": 0, "logical_count": torch.from_numpy(buffer.astype(np.int32)),
                    "average_utilization_rate_over_window": None}, path)
        paths.append(path)
    return paths


def _sidecar(tmp_path, buffers, info=INFO, **kwargs):
    server = RecordedSGLang(info, _dumps(tmp_path, buffers), tmp_path / "dumps",
                            sglang_page(prompt=10, cached=0, ttft=(1, 1, 1)))
    posted, restarts, clock = [], Restarts(), Clock()
    sidecar = Sidecar(server, MODEL, Where("small", "g0", Role.decode), tmp_path / "dumps",
                      DirectoryStore(tmp_path / "placement"), restarts, posted.append, window_seconds=10,
                      clock=clock, **kwargs)
    return sidecar, server, posted, restarts, clock


def _answer(version: int, table: np.ndarray) -> DesiredState:
    return DesiredState(placement_version=version, slot_to_expert=Array.from_numpy(table))


def _good(seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.stack([np.r_[rng.permutation(16), [0, 1, 2, 3]] for _ in range(4)])


def test_a_window_is_posted_and_a_malformed_dump_is_not(tmp_path):
    ok = np.zeros((8, 5, 16))
    ok[0, 1:, 2] = 5
    bad = np.zeros((8, 6, 16))  # another model's layers
    sidecar, _, posted, _, _ = _sidecar(tmp_path, [np.zeros((8, 5, 16)), ok, bad])
    sidecar.begin()
    snapshot = sidecar.close_window(1_800_000_000.0)
    assert snapshot is not None and snapshot.expert_tokens.to_numpy()[:, 2].tolist() == [5] * 4
    assert snapshot.ranks[0].serving is not None and snapshot.ranks[1].serving is None
    assert sidecar.close_window(1_800_000_010.0) is None and len(posted) == 1 and sidecar.num_refused == 1


def test_a_placement_that_drops_an_expert_writes_nothing_and_restarts_nothing(tmp_path):
    sidecar, _, _, restarts, _ = _sidecar(tmp_path, [np.zeros((8, 5, 16))], min_restart_seconds=0)
    sidecar.begin()
    bad = _good()
    bad[2, bad[2] == 9] = 0
    sidecar.on_answer(_answer(1, bad))
    assert sidecar.apply_answers() is None
    assert sidecar.store.read() is None and restarts.num_calls == 0 and sidecar.num_refused == 1


def test_one_restart_per_min_restart_seconds(tmp_path):
    sidecar, _, _, restarts, clock = _sidecar(tmp_path, [np.zeros((8, 5, 16))], min_restart_seconds=600)
    sidecar.begin()
    sidecar.on_answer(_answer(1, _good(1)))
    assert sidecar.apply_answers().version == 1 and restarts.num_calls == 1
    clock.now += 60
    sidecar.on_answer(_answer(2, _good(2)))
    assert sidecar.apply_answers() is None and restarts.num_calls == 1
    clock.now += 600
    sidecar.on_answer(_answer(2, _good(2)))
    assert sidecar.apply_answers().version == 2 and restarts.num_calls == 2


def test_a_restarted_server_runs_the_file_written_before_it_started_and_records_again(tmp_path):
    sidecar, server, posted, _, clock = _sidecar(tmp_path, [np.zeros((8, 5, 16))] * 3, min_restart_seconds=0)
    sidecar.begin()
    assert sidecar.running.version == 0 and server.num_started == 1
    table = _good(3)
    sidecar.store.write(StoredPlacement(4, 0, clock.now, location_file(table, MODEL, 20)))
    server.info = server.info | {"startup_time": clock.now + 5}  # restarted after the file was written
    assert sidecar.close_window(clock.now) is None and posted == []  # that window is lost with the restart
    assert server.num_started == 2 and sidecar.running.version == 4
    assert np.array_equal(sidecar.running.slot_to_expert, table)


def test_builtin_eplb_is_refused_before_anything_is_recorded(tmp_path):
    sidecar, server, _, _, _ = _sidecar(tmp_path, [], info=INFO | {"enable_eplb": True})
    with pytest.raises(ServerRefused, match="--enable-eplb"):
        sidecar.begin()
    assert server.num_started == 0


EPOCH = "1700000000000000.abc.7"


def _record(call: int, weight: np.ndarray) -> dict:
    """What the live plugin writes at a rebalance (agents/adapters/sglang/live_plugin.py)."""
    return {"epoch": EPOCH, "model": "5x16", "call": call, "at": 1.0, "weight": weight.tolist(), "current": None,
            "num_replicas": 20, "num_ranks": None, "sglang": "0.5.23"}


def test_live_needs_sglangs_eplb(tmp_path):
    sidecar, _, _, _, _ = _sidecar(tmp_path, [], live_dir=tmp_path / "live")
    with pytest.raises(ServerRefused, match="--live applies placements at SGLang's EPLB rebalance"):
        sidecar.begin()


def test_live_posts_the_rebalances_records_and_arms_placements_without_a_restart(tmp_path):
    live = tmp_path / "live"
    sidecar, server, posted, restarts, _ = _sidecar(tmp_path, [], info=INFO | {"enable_eplb": True}, live_dir=live)
    state_dir.write_load(live, _record(0, np.zeros((5, 16), dtype=np.int64)))
    sidecar.begin()
    assert server.num_started == 0  # SGLang's EPLB drives the recorder
    weight = np.zeros((5, 16), dtype=np.int64)
    weight[1:, 7] = 11
    state_dir.write_load(live, _record(1, weight))
    state_dir.write_load(live, _record(2, weight))
    snapshot = sidecar.close_window(1_800_000_000.0)
    assert snapshot.expert_tokens.to_numpy()[:, 7].tolist() == [22] * 4
    assert snapshot.ranks[0].balancer_events == 2  # the rebalances SGLang's EPLB recorded: what the watchdog counts
    quiet = sidecar.close_window(1_800_000_005.0)  # none since: posted, 0 of them, no tokens
    assert quiet.ranks[0].balancer_events == 0 and not quiet.expert_tokens.to_numpy().any()
    table = _good(5)
    sidecar.on_answer(_answer(3, table))
    assert sidecar.apply_answers().version == 3 and restarts.num_calls == 0
    (armed,) = state_dir.read_armed(live)
    assert armed.from_call == 4 and armed.table.shape == (5, 20) and np.array_equal(armed.table[1:], table)
    sidecar.on_answer(_answer(3, table))
    assert sidecar.apply_answers() is None and len(state_dir.read_armed(live)) == 1  # not re-armed later
    bad = _good(6)
    bad[0, bad[0] == 4] = 5
    sidecar.on_answer(_answer(4, bad))
    assert sidecar.apply_answers() is None and len(state_dir.read_armed(live)) == 1
    for call in (3, 4):
        state_dir.write_load(live, _record(call, weight))
    sidecar.close_window(1_800_000_010.0)
    assert sidecar.running.version == 3 and np.array_equal(sidecar.running.slot_to_expert, table)


def test_a_restart_for_a_placement_is_timed_to_the_first_window_after_it(tmp_path):
    """What a change costs an SGLang group (controlplane/plan/change_cost.py): from the restart asked to the end
    of the first window the restarted server posts, once; windows before the restart say nothing of it."""
    sidecar, server, posted, restarts, clock = _sidecar(tmp_path, [np.zeros((8, 5, 16))] * 6, min_restart_seconds=0)
    sidecar.begin()
    sidecar.on_answer(_answer(1, _good(1)))
    assert sidecar.apply_answers().version == 1 and restarts.num_calls == 1
    clock.now += 10
    before = sidecar.close_window(clock.now - 10)  # the old server still answered: not restarted yet
    assert before.ranks[0].balancer_stall_seconds is None
    clock.now += 150  # no /health, a reload
    server.info = server.info | {"startup_time": clock.now - 5}
    assert sidecar.close_window(clock.now - 10) is None  # the restart noticed: that window is lost
    clock.now += 10
    first = sidecar.close_window(clock.now - 10)
    assert first.ranks[0].balancer_events == 1 and first.ranks[0].balancer_stall_seconds == 170.0
    clock.now += 10
    assert sidecar.close_window(clock.now - 10).ranks[0].balancer_stall_seconds is None  # once
