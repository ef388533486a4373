"""Pacing of a pool's hourly allowances: a loop that would act at every cooldown never runs them dry."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from agents.protocol import default_slot_to_expert
from controlplane.desired import KnobKind, Mode, Policy
from controlplane.observed.knob_change import KnobChange
from controlplane.observed.pool import PoolState
from controlplane.observed.window import RANK_REPORTS, Window
from controlplane.plan.pacing import FREE_SHARE, HOUR, placement_allowance

NUM_LAYERS, NUM_SLOTS = 2, 20
POLICY = Policy(mode=Mode.auto, cooldown_seconds=30, max_actions_per_hour=60, max_moved_slots_fraction=0.5,
                max_moved_slots_per_hour_fraction=4.0)


def state(change_times: list[float], moved_last_hour: int = 0, now: float = 0.0) -> PoolState:
    recent = [t for t in change_times if t > now - HOUR]
    return PoolState(deployment="d", role="decode", num_layers=NUM_LAYERS, num_experts=16, num_groups=4, ep_size=4,
                     slots_per_rank=5, gpus_per_node=4, num_agents=4, num_fresh_agents=4, placement_version=0,
                     slot_to_expert=default_slot_to_expert(NUM_LAYERS, 16, NUM_SLOTS), windows=(),
                     last_change_at=max(change_times, default=None), moved_slots_last_hour=moved_last_hour,
                     num_actions_last_hour=len(recent),
                     changes=tuple(KnobChange(i, KnobKind.placement, t, "verified", 0) for i, t in enumerate(recent)))


def eager_loop(policy: Policy, seconds: float, step: float = 5.0) -> list[float]:
    """Times a loop that wants to change the placement at every step gets to change it."""
    times: list[float] = []
    for now in np.arange(step, seconds, step):
        if placement_allowance(policy, state(times, now=now), float(now)).hold_reason is None:
            times.append(float(now))
    return times


def test_an_eager_loop_bursts_then_keeps_acting_all_hour_and_never_hits_the_cap():
    times = eager_loop(POLICY, 3 * HOUR)
    # the burst: the first changes come at the cooldown
    assert np.diff(times[:10]).max() == POLICY.cooldown_seconds
    # never dry: without pacing the hour's 60 changes go in 30 minutes and the next waits ~30 minutes
    assert np.diff(times).max() <= 2 * HOUR / POLICY.max_actions_per_hour + 5.0
    counts = [sum(1 for u in times if t - HOUR < u <= t) for t in times]
    assert max(counts) <= POLICY.max_actions_per_hour
    # and the hour's allowance is used, not hoarded: in the third hour the pace is the even one
    third_hour = [t for t in times if t >= 2 * HOUR]
    assert len(third_hour) >= 0.9 * POLICY.max_actions_per_hour


def test_past_the_free_share_a_quick_change_waits_and_says_how_long():
    burst = [10.0 * i for i in range(1, 37)]  # 36 changes in 6 minutes: over the free 30 and the pace since
    now = burst[-1] + POLICY.cooldown_seconds
    held = placement_allowance(POLICY, state(burst, now=now), now)
    assert held.hold_reason is not None and "pacing" in held.hold_reason
    wait = float(held.hold_reason.rsplit("next in ", 1)[1].rstrip("s)"))
    assert placement_allowance(POLICY, state(burst, now=now + wait - 1), now + wait - 1).hold_reason is not None
    assert placement_allowance(POLICY, state(burst, now=now + wait + 1), now + wait + 1).hold_reason is None


def test_past_half_the_moves_budget_a_change_moves_at_the_even_rate():
    per_hour = int(POLICY.max_moved_slots_per_hour_fraction * NUM_LAYERS * NUM_SLOTS)  # 160
    fresh = placement_allowance(POLICY, state([0.0], moved_last_hour=10, now=60.0), 60.0)
    assert fresh.max_moved_slots == int(POLICY.max_moved_slots_fraction * NUM_LAYERS * NUM_SLOTS)
    spent = placement_allowance(POLICY, state([0.0], moved_last_hour=per_hour // 2, now=450.0), 450.0)
    assert spent.max_moved_slots == int((1 - FREE_SHARE) * per_hour * 450.0 / HOUR)  # 10
    no_cooldown = POLICY.model_copy(update={"cooldown_seconds": 0})
    soon = placement_allowance(no_cooldown, state([0.0], moved_last_hour=per_hour // 2, now=10.0), 10.0)
    assert soon.hold_reason is not None and "moves budget" in soon.hold_reason


def windows_under(imbalances: list[float], expert_tokens: list[np.ndarray] | None = None) -> tuple[Window, ...]:
    """Complete windows under placement v0 whose GPU load max/mean is each of `imbalances` (4 GPUs), routing
    `expert_tokens` ([NUM_LAYERS, 16] each; default: every expert alike)."""
    out = []
    for index, ratio in enumerate(imbalances):
        gpu = np.array([ratio, (4 - ratio) / 3, (4 - ratio) / 3, (4 - ratio) / 3]) * 100.0
        slot_tokens = np.repeat(gpu / 5, 5)[None].repeat(NUM_LAYERS, axis=0)  # 5 slots per GPU
        out.append(Window(index=index, start=5.0 * index, seconds=5.0, placement_version=0, num_reports=4,
                          num_slot_reports=4, slot_tokens=slot_tokens,
                          expert_tokens=np.ones((NUM_LAYERS, 16)) if expert_tokens is None else expert_tokens[index],
                          counters={f"{RANK_REPORTS}{r}": 1 for r in range(4)}))
    return tuple(out)


def test_under_drift_the_next_change_waits_for_the_even_pace_and_moves_what_the_budget_earned():
    even = HOUR / POLICY.max_actions_per_hour  # 60 s
    drifted = replace(state([0.0], now=40.0), windows=windows_under([1.02, 1.08, 1.3, 1.4]))
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
    held = placement_allowance(POLICY, state([0.0], moved_last_hour=per_hour // 2, now=40.0), 40.0)
    assert held.hold_reason is not None and "moves budget" in held.hold_reason and "even pace" in held.hold_reason
    assert placement_allowance(POLICY, state([0.0], moved_last_hour=per_hour // 2 - 1, now=40.0), 40.0) \
        .hold_reason is None
