"""Every fault of ours inside the engine's step leaves the engine's own answer: the vLLM policy wrapper
(agents/adapters/vllm/policy.py, around vLLM's own DefaultEplbPolicy from the pinned wheel) and the SGLang live
plugin's hook (agents/adapters/sglang/live_plugin.py; SGLang's original is a stand-in here, as SGLang runs only in
its own environment: tests/adapters/test_sglang_live_plugin.py runs it there). On the old code each of these raised
out of vLLM's `EplbState.rearrange` / SGLang's `EPLBManager.rebalance`. Each fault is counted by cause, logged
once, and carried by the next record written (state_dir.py), where the sidecar reads it."""

from __future__ import annotations

import errno
import json
import logging
import os
import shutil

import numpy as np
import pytest
import torch
from support.engines.wheels import vllm_policy_module

from agents.adapters import state_dir as state
from agents.adapters.arming import ArmedPlacement
from agents.adapters.faults import Faults
from agents.adapters.sglang import live_plugin
from agents.adapters.vllm.policy import wrap_policy

EPOCH = "1700000000000000.abc.7"
NUM_LAYERS, NUM_EXPERTS, NUM_SLOTS, NUM_RANKS = 3, 16, 20, 4
GOOD = np.tile(np.r_[np.arange(16), [0, 0, 1, 1]], (NUM_LAYERS, 1))


def _weight(seed: int, num_layers: int = NUM_LAYERS) -> torch.Tensor:
    rng = np.random.default_rng(seed)
    return torch.from_numpy(rng.zipf(1.5, size=(num_layers, NUM_EXPERTS)).clip(max=10_000).astype(np.int64))


def _rearrange(policy: type, seed: int, num_layers: int = NUM_LAYERS) -> torch.Tensor:
    return policy.rebalance_experts(_weight(seed, num_layers), NUM_SLOTS, 4, 1, NUM_RANKS,
                                    torch.arange(NUM_SLOTS).repeat(num_layers, 1) % NUM_EXPERTS)


@pytest.fixture
def default_policy() -> type:
    return vllm_policy_module().DefaultEplbPolicy


def _policy(default_policy, directory):  # noqa: ANN001
    faults = Faults(logging.getLogger("moectl.test.plugin"))
    return wrap_policy(default_policy, directory, epoch=EPOCH, is_recording_rank=lambda: True, faults=faults), faults


def _full_disk(monkeypatch) -> None:
    def full(fd, data):  # noqa: ANN001
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "write", full)


def _dir_replaced_by_a_file(directory) -> None:  # noqa: ANN001
    shutil.rmtree(directory)
    directory.write_text("not a directory")


def _torn(directory) -> None:  # noqa: ANN001
    (directory / "placements.json").write_text('[{"version": 3, "from_call": 0, "ta')


def _ragged(directory) -> None:  # noqa: ANN001
    (directory / "placements.json").write_text(json.dumps(
        [{"version": 3, "from_call": 0, "epoch": EPOCH, "model": "3x16", "table": [[0, 1, 2], [0]]}]))


def _missing_field(directory) -> None:  # noqa: ANN001
    (directory / "placements.json").write_text(json.dumps(
        [{"version": 3, "epoch": EPOCH, "model": "3x16", "table": GOOD.tolist()}]))  # no from_call


FAULTS = {"full disk": (_full_disk, "load not recorded"), "dir replaced by a file": (_dir_replaced_by_a_file,
                                                                                     "load not recorded"),
          "torn placements.json": (_torn, "unreadable placements.json"),
          "ragged placements.json": (_ragged, "unreadable placement entry"),
          "entry missing a field": (_missing_field, "unreadable placement entry")}


@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_vllm_rearrange_returns_vllms_own_map_through_a_fault(tmp_path, default_policy, monkeypatch, fault):
    directory = tmp_path / "state"
    policy, faults = _policy(default_policy, directory)
    _rearrange(policy, 0)  # the directory exists, with a record
    inject, cause = FAULTS[fault]
    inject(monkeypatch) if inject is _full_disk else inject(directory)
    got = _rearrange(policy, 1)
    monkeypatch.undo()
    assert torch.equal(got, _rearrange(default_policy, 1))
    assert faults.snapshot().get(cause) == 1, faults.snapshot()


def test_any_other_failure_of_ours_returns_vllms_own_map_and_is_counted_once_a_cause(tmp_path, default_policy,
                                                                                   monkeypatch, caplog):
    policy, faults = _policy(default_policy, tmp_path)
    monkeypatch.setattr(state, "read_armed", lambda *a, **k: 1 / 0)
    with caplog.at_level(logging.ERROR, "moectl.test.plugin"):
        got = [_rearrange(policy, seed) for seed in range(3)]
    assert all(torch.equal(g, _rearrange(default_policy, s)) for s, g in enumerate(got))
    assert faults.snapshot() == {"plugin failed (ZeroDivisionError)": 3} and len(caplog.records) == 1
    monkeypatch.undo()
    _rearrange(policy, 3)
    assert state.read_loads(tmp_path)[-1]["faults"] == {"plugin failed (ZeroDivisionError)": 3}  # for the sidecar


def test_an_mtp_drafters_records_interleave_apart_and_the_main_models_placement_applies(tmp_path, default_policy):
    """vLLM calls the policy once per model state: the drafter's 1-layer weights between the main model's. Old
    code: one call counter and one stream, so the main model's placement was refused at the drafter's call."""
    policy, faults = _policy(default_policy, tmp_path)
    for seed in range(2):
        _rearrange(policy, seed)
        _rearrange(policy, seed, num_layers=1)  # the drafter
    state.arm(tmp_path, ArmedPlacement(7, 2, GOOD, EPOCH, state.model_key(NUM_LAYERS, NUM_EXPERTS)))
    main, drafter = _rearrange(policy, 5), _rearrange(policy, 5, num_layers=1)
    assert torch.equal(main, torch.from_numpy(GOOD))
    assert torch.equal(drafter, _rearrange(default_policy, 5, num_layers=1)) and faults.total == 0
    assert [r["call"] for r in state.read_loads(tmp_path, model="3x16")] == [0, 1, 2]
    assert [r["call"] for r in state.read_loads(tmp_path, model="1x16")] == [0, 1, 2]


def test_a_placement_of_an_older_engine_life_is_never_applied(tmp_path, default_policy):
    """Old code: a placement armed in the previous process for call 4 applied again at the new process's call 4."""
    state.arm(tmp_path, ArmedPlacement(7, 0, GOOD, "1600000000000000.abc.1", "3x16"))
    policy, _ = _policy(default_policy, tmp_path)
    assert torch.equal(_rearrange(policy, 1), _rearrange(default_policy, 1))
    assert state.read_armed(tmp_path) == []  # cleared by the new life's first record


# -- SGLang's hook ------------------------------------------------------------------------------------------
def _sglang_hook(directory, monkeypatch):  # noqa: ANN001
    monkeypatch.setattr(live_plugin, "manager_current_map",
                        lambda: np.tile(np.arange(NUM_SLOTS) % NUM_EXPERTS, (NUM_LAYERS, 1)))
    faults = Faults(logging.getLogger("moectl.test.sglang"))
    return live_plugin.make_hook(directory, epoch=EPOCH, is_recording_rank=lambda: True, faults=faults), faults


def _sglangs_own(manager, logical_count, **kwargs):  # noqa: ANN001
    return "sglang's own layout"


@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_sglang_rebalance_returns_sglangs_own_layout_through_a_fault(tmp_path, monkeypatch, fault):
    directory = tmp_path / "state"
    hook, faults = _sglang_hook(directory, monkeypatch)
    hook(_sglangs_own, None, _weight(0).numpy())
    inject, cause = FAULTS[fault]
    inject(monkeypatch) if inject is _full_disk else inject(directory)
    got = hook(_sglangs_own, None, _weight(1).numpy(), broadcast_over_world=False)
    monkeypatch.undo()
    assert got == "sglang's own layout" and faults.snapshot().get(cause) == 1, faults.snapshot()


def test_sglang_any_other_failure_returns_sglangs_own_layout(tmp_path, monkeypatch):
    hook, faults = _sglang_hook(tmp_path, monkeypatch)
    assert hook(_sglangs_own, None, "not a count") == "sglang's own layout"
    assert list(faults.snapshot()) == ["plugin failed (ValueError)"]
