"""Pacing of a pool's hourly allowances: a loop that would act at every cooldown never runs them dry."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from agents.protocol import default_slot_to_expert
from controlplane.desired import KnobKind, Mode, Policy
from controlplane.observed.knob_change import KnobChange
from controlplane.observed.pool import PoolState
from controlplane.observed.window import Window
from controlplane.plan.pacing import HOUR, placement_allowance
from tests.support.pool_states import every_rank_reported, loop_window, pool_state

NUM_LAYERS, NUM_SLOTS = 2, 20
POLICY = Policy(mode=Mode.auto, cooldown_seconds=30, max_actions_per_hour=60, max_moved_slots_fraction=0.5,
                max_moved_slots_per_hour_fraction=4.0)


def paced_pool(change_times: list[float], moved_last_hour: int = 0, now: float = 0.0) -> PoolState:
    """4 GPUs of 5 slots whose placement changed at `change_times` (verified), `moved_last_hour` slots moved."""
    recent = [t for t in change_times if t > now - HOUR]
    return pool_state(default_slot_to_expert(NUM_LAYERS, 16, NUM_SLOTS), 16, ep=4, gpus_per_node=4,
                      last_change_at=max(change_times, default=None), moved_slots_last_hour=moved_last_hour,
                      num_actions_last_hour=len(recent),
                      changes=tuple(KnobChange(i, KnobKind.placement, t, "verified", 0) for i, t in enumerate(recent)))


def windows_under(imbalances: list[float], expert_tokens: list[np.ndarray] | None = None) -> tuple[Window, ...]:
    """Complete windows under placement v0 whose GPU load max/mean is each of `imbalances` (4 GPUs), routing
    `expert_tokens` ([NUM_LAYERS, 16] each; default: every expert alike)."""
    out = []
    for index, ratio in enumerate(imbalances):
        gpu = np.array([ratio, (4 - ratio) / 3, (4 - ratio) / 3, (4 - ratio) / 3]) * 100.0
        slot_tokens = np.repeat(gpu / 5, 5)[None].repeat(NUM_LAYERS, axis=0)  # 5 slots per GPU
        routed = np.ones((NUM_LAYERS, 16)) if expert_tokens is None else expert_tokens[index]
        out.append(loop_window(index, routed, slot_tokens, seconds=5.0, num_reports=4,
                               counters=every_rank_reported(4)))
    return tuple(out)


def test_under_drift_the_next_change_waits_for_the_even_pace_and_moves_what_the_budget_earned():
    even = HOUR / POLICY.max_actions_per_hour  # 60 s
    drifted = replace(paced_pool([0.0], now=40.0), windows=windows_under([1.02, 1.08, 1.3, 1.4]))
    assert drifted.current_windows()[0].imbalance(4) == pytest.approx(1.02)
    held = placement_allowance(POLICY, drifted, 40.0)
    assert held.hold_reason is not None and "drifts" in held.hold_reason
    allowed = placement_allowance(POLICY, drifted, even + 1)
    per_hour = int(POLICY.max_moved_slots_per_hour_fraction * NUM_LAYERS * NUM_SLOTS)
    assert allowed.hold_reason is None and allowed.max_moved_slots == int(per_hour * (even + 1) / HOUR)
    later = placement_allowance(POLICY, drifted, 4 * even)  # a slower drift: the budget earned since is larger
    assert later.max_moved_slots == int(per_hour * 4 * even / HOUR) > allowed.max_moved_slots
    # a change that never reached the threshold is a shift still being answered: the follow-up may come at once,
    # with the whole per-change budget
    short = replace(drifted, windows=windows_under([1.3, 1.35, 1.4]))
    follow_up = placement_allowance(POLICY, short, 40.0)
    assert follow_up.hold_reason is None
    assert follow_up.max_moved_slots == int(POLICY.max_moved_slots_fraction * NUM_LAYERS * NUM_SLOTS)
    # nor is a sudden shift of the hot experts after the threshold was reached: a new load, answered at once
    alike, hot = np.ones((NUM_LAYERS, 16)), np.ones((NUM_LAYERS, 16))
    hot[:, :2] = 50.0
    shifted = replace(drifted, windows=windows_under([1.02, 1.08, 1.3, 1.4], [alike, alike, hot, hot]))
    assert placement_allowance(POLICY, shifted, 40.0).hold_reason is None
    # nor is a load still within the threshold drifting: a change then is asked for (a person, an alert)
    within = replace(drifted, windows=windows_under([1.02, 1.05]))
    assert placement_allowance(POLICY, within, 40.0).hold_reason is None


def test_past_half_the_moves_budget_a_quick_change_waits_for_the_even_pace():
    per_hour = int(POLICY.max_moved_slots_per_hour_fraction * NUM_LAYERS * NUM_SLOTS)
    held = placement_allowance(POLICY, paced_pool([0.0], moved_last_hour=per_hour // 2, now=40.0), 40.0)
    assert held.hold_reason is not None and "moves budget" in held.hold_reason and "even pace" in held.hold_reason
    assert placement_allowance(POLICY, paced_pool([0.0], moved_last_hour=per_hour // 2 - 1, now=40.0), 40.0) \
        .hold_reason is None
