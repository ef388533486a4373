"""The dispatch-time split's step-level straggler: summed per window by the agent, carried on the wire, pooled by the
controller into with-split / fixed-shares / bound ratios."""

from __future__ import annotations

import pytest
import torch
from support.pool_states import loop_window
from support.ranks import SIM_MODEL, identity
from support.step_stats import step

from agents.protocol.group import RankRow
from agents.telemetry.latency import RequestTimer
from agents.telemetry.windows import WindowBuilder
from controlplane.collect.aggregate import group_counters


def measured_step(i: int, now: float, is_split_routed: bool):
    stats = step(i, now)
    layers = stats.moe.expert_tokens.shape[0]
    stats.moe.split_max_tokens = torch.full((layers,), 30, dtype=torch.int64)  # busiest GPU per layer, split
    stats.moe.shares_max_tokens = torch.full((layers,), 45, dtype=torch.int64)  # ... and with the fixed shares
    stats.moe.bound_max_tokens = torch.full((layers,), 28.5, dtype=torch.float64)
    stats.moe.group_tokens = torch.full((layers,), 50, dtype=torch.int64)  # 2 GPUs: the mean GPU holds 25
    stats.moe.is_split_routed = is_split_routed
    return stats


def test_a_window_carries_the_step_straggler_with_and_without_the_split():
    builder = WindowBuilder(identity(0, 2), SIM_MODEL, window_seconds=2.0, now=1001.1)
    timer = RequestTimer()
    for i, now in enumerate((1001.1, 1001.5)):
        stats = measured_step(i, now, is_split_routed=True)
        builder.add(stats, timer.observe(stats))
    load = builder.roll(1002.0).snapshot.step_load
    layers = SIM_MODEL.num_layers
    assert load.is_split_routed
    assert load.split_max_tokens == 2 * layers * 30 and load.shares_max_tokens == 2 * layers * 45
    assert load.bound_max_tokens == pytest.approx(2 * layers * 28.5)
    assert load.mean_tokens == 2 * layers * 25
    # a rank without the split measured reports none, and the controller reads it as not measured
    plain = WindowBuilder(identity(0, 2), SIM_MODEL, window_seconds=2.0, now=1001.1)
    plain.add(step(0, 1001.1), RequestTimer().observe(step(0, 1001.1)))
    snapshot = plain.roll(1002.0).snapshot
    assert snapshot.step_load is None and "step_load" not in snapshot.model_dump(exclude_none=True)
    assert "step_mean_tokens" not in group_counters([RankRow.of(snapshot)])


def test_the_controller_pools_the_ranks_into_step_imbalance_ratios():
    rows = []
    for rank in range(2):
        builder = WindowBuilder(identity(rank, 2), SIM_MODEL, window_seconds=2.0, now=1001.1)
        stats = measured_step(0, 1001.1, is_split_routed=False)
        builder.add(stats, RequestTimer().observe(stats))
        rows.append(RankRow.of(builder.roll(1002.0).snapshot))
    counters = group_counters(rows)
    window = loop_window(0, torch.zeros(1, 1).numpy(), torch.zeros(1, 2).numpy(), seconds=2.0, num_reports=2,
                         counters=counters)
    ratios = window.step_imbalance()
    assert ratios == pytest.approx({"split": 30 / 25, "shares": 45 / 25, "bound": 28.5 / 25, "routed": 0.0})
