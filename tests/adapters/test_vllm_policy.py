"""The `vllm.general_plugins` policy wrapper (agents/adapters/vllm/policy.py) around vLLM's own DefaultEplbPolicy
(loaded from the pinned wheel and run): it records each weight, returns vLLM's own map until a placement is armed,
then the armed one on every rank from the same rearrange, and falls back where the armed one would drop an expert."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from support.engines.wheels import vllm_policy_module

from agents.adapters import state_dir as state
from agents.adapters.arming import ArmedPlacement, arm_call
from agents.adapters.vllm.policy import wrap_policy

EPOCH = "1700000000000000.abc.7"

NUM_LAYERS, NUM_EXPERTS, NUM_SLOTS, NUM_RANKS = 3, 16, 20, 4


def _weight(seed: int) -> torch.Tensor:
    rng = np.random.default_rng(seed)
    return torch.from_numpy(rng.zipf(1.5, size=(NUM_LAYERS, NUM_EXPERTS)).clip(max=10_000).astype(np.int64))


def _rearrange(policy: type, seed: int) -> torch.Tensor:
    """One rearrange as EplbState.rearrange calls the policy: the load, the layout and the map in force."""
    return policy.rebalance_experts(_weight(seed), NUM_SLOTS, 4, 1, NUM_RANKS,
                                    torch.arange(NUM_SLOTS).repeat(NUM_LAYERS, 1) % NUM_EXPERTS)


@pytest.fixture
def default_policy() -> type:
    return vllm_policy_module().DefaultEplbPolicy


def test_records_each_weight_and_returns_vllms_own_map_without_a_placement(tmp_path, default_policy):
    policy = wrap_policy(default_policy, tmp_path, epoch=EPOCH, version="0.34.0", is_recording_rank=lambda: True)
    got = _rearrange(policy, 1)
    assert torch.equal(got, _rearrange(default_policy, 1))
    (record,) = state.read_loads(tmp_path)
    assert record["call"] == 0 and np.array_equal(record["weight"], _weight(1).numpy())
    assert record["num_replicas"] == NUM_SLOTS and record["num_ranks"] == NUM_RANKS


def test_every_rank_returns_the_armed_placement_from_the_same_rearrange(tmp_path, default_policy):
    ranks = [wrap_policy(default_policy, tmp_path, epoch=EPOCH, is_recording_rank=lambda r=r: r == 0) for r in range(4)]
    first = [_rearrange(rank, 1) for rank in ranks]  # call 0 on every rank
    table = np.tile(np.r_[np.arange(16), [0, 0, 1, 1]], (NUM_LAYERS, 1))
    state.write_armed(tmp_path, [ArmedPlacement(7, arm_call(0), table, EPOCH, "3x16")])  # posted between calls 0 and 1
    second = [_rearrange(rank, 2) for rank in ranks]  # call 1: not yet
    third = [_rearrange(rank, 3) for rank in ranks]  # call 2: on every rank
    assert all(not torch.equal(got, torch.from_numpy(table)) for got in first + second)
    assert all(torch.equal(got, torch.from_numpy(table)) for got in third)
    assert [r["call"] for r in state.read_loads(tmp_path)] == [0, 1, 2]  # rank 0 alone wrote them


def test_an_armed_placement_that_drops_an_expert_falls_back_to_vllms_policy(tmp_path, default_policy):
    policy = wrap_policy(default_policy, tmp_path, epoch=EPOCH, is_recording_rank=lambda: True)
    bad = np.tile(np.r_[np.arange(15), [0, 0, 1, 1, 2]], (NUM_LAYERS, 1))  # expert 15 lost
    state.write_armed(tmp_path, [ArmedPlacement(3, 0, bad, EPOCH, "3x16")])
    got = _rearrange(policy, 4)
    assert torch.equal(got, _rearrange(default_policy, 4))


def test_each_rearrange_records_how_long_the_policys_call_took(tmp_path, default_policy):
    policy = wrap_policy(default_policy, tmp_path, epoch=EPOCH, version="0.34.0", is_recording_rank=lambda: True)
    for seed in (1, 2, 3):
        _rearrange(policy, seed)
    records = state.read_loads(tmp_path)
    assert [r["call"] for r in records] == [0, 1, 2]
    assert "previous_seconds" not in records[0]  # written as the first call starts: nothing timed yet
    assert all(0 < r["previous_seconds"] < 60 for r in records[1:])  # the call before, vLLM's own policy in it
