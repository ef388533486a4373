"""The planner's rules on a knob's history: no step while the last awaits its verdict, no reversal within the
flap window, and a parked knob stays put until its inputs change materially (both knobs, one rule)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from agents.protocol import PlacementTable, default_slot_to_expert
from controlplane.desired import Decision, Effect, Mode, Policy
from controlplane.observed.knob_change import KnobChange
from controlplane.observed.knob_park import KnobInputs, Parked
from controlplane.observed.pool import PoolState
from controlplane.observed.window import Window
from controlplane.plan.placement import plan_placement
from controlplane.plan.routing_limit import plan_routing
from tests.support.pool_states import every_rank_reported, loop_window, pool_state, routing_in_force

EP, SPR, LAYERS, EXPERTS = 4, 5, 2, 16
TABLE = default_slot_to_expert(LAYERS, EXPERTS, EP * SPR)
POLICY = Policy(mode=Mode.auto, cooldown_seconds=0, flap_window_seconds=600, max_moved_slots_fraction=0.5)
NOW = 2000.0


def recall_window(index: int, *, share: float = 0.2, recall: float = 0.5, hot: float = 20.0,
                  hot_expert: int = 0) -> Window:
    """10 s ending before NOW; 100 tokens per expert but one hot expert per layer; recall against the unconstrained
    top-k (0.5: under the floor at a limit tighter than the model's own)."""
    load = np.full((LAYERS, EXPERTS), 100.0)
    load[:, hot_expert] *= hot
    counters = every_rank_reported(EP) | {
        "forward_seconds": 1.0, "dispatch_seconds": share, "routing_recall_sum": recall, "routing_recall_count": 1}
    return loop_window(index, load, PlacementTable(TABLE).slot_load(load), start=NOW - 10.0 * (200 - index),
                       num_reports=EP, counters=counters)


def tightened_pool(*, topk_group: int | None = 1, changes=(), parked=None, **window_args) -> PoolState:
    """70 s of windows; tightened to 1 group (the model's own: 2) with recall 0.8 of the unconstrained top-k at the
    model's own."""
    return pool_state(TABLE, EXPERTS, (recall_window(193 + i, **window_args) for i in range(7)), ep=EP, top_k=4,
                      model_topk_group=2, in_force=routing_in_force(topk_group, 0.0), recall_reference=0.8,
                      model_key="m", policy_version=1, changes=tuple(changes), parked=parked or {})


def tightening(at: float, status: str = "verified") -> KnobChange:
    return KnobChange(5, "routing", at, status, -1, Effect("all2all_share", -1, 0.4, 0.3))


def test_a_loosening_that_would_reverse_a_recent_tightening_waits_out_the_flap_window():
    recent = plan_routing(POLICY, tightened_pool(changes=[tightening(NOW - 300)]), NOW)
    assert recent.topk_group == 1 and "reverse action 5" in recent.reason, recent.reason
    later = plan_routing(POLICY, tightened_pool(changes=[tightening(NOW - 700)]), NOW)
    assert later.topk_group == 2 and later.effect.signal == "routing_recall", later.reason


def test_no_step_while_the_last_awaits_its_verdict():
    step = plan_routing(POLICY, tightened_pool(changes=[tightening(NOW - 700, status="applied")]), NOW)
    assert step.topk_group == 1 and "awaits its verdict" in step.reason


def routing_park(tokens_per_second: float) -> dict:
    return {"routing": Parked("routing", NOW - 100, 5, "did not move as intended",
                              KnobInputs("m", 1, tokens_per_second, None))}


def test_a_parked_routing_limit_holds_until_the_load_changes_materially():
    # at the model's own limit, share over target: it would tighten, but the knob is parked
    state = tightened_pool(topk_group=None)
    rate = state.knob_inputs(with_expert_share=False).tokens_per_second
    assert rate == pytest.approx((15 * 100 + 2000) / 4 / 10)  # layer 0's rows over top-4, per 10 s window
    parked = plan_routing(POLICY, tightened_pool(topk_group=None, share=0.8, recall=0.8, parked=routing_park(rate)),
                          NOW)
    assert parked.topk_group is None and "parked since action 5" in parked.reason and parked.unparked is None
    moved = plan_routing(POLICY, tightened_pool(topk_group=None, share=0.8, recall=0.8,
                                                parked=routing_park(rate / 3)), NOW)
    assert moved.topk_group == 1 and "token rate moved" in moved.unparked, moved


@pytest.mark.parametrize("hot_expert, is_asked, decision, words", [
    (0, False, Decision.hold, "placement parked since action 9"),
    (0, True, Decision.rebalance, "a person asked"),  # they see the evidence
    (5, False, Decision.rebalance, "the expert load shifted"),  # another expert is hot now
])
def test_a_parked_placement_holds_until_the_load_shifts_or_a_person_asks(hot_expert, is_asked, decision, words):
    at_park = tightened_pool(topk_group=None)
    inputs = at_park.knob_inputs(with_expert_share=True)
    state = replace(tightened_pool(topk_group=None, hot_expert=hot_expert),
                    parked={"placement": Parked("placement", NOW - 100, 9, "did not move as intended", inputs)})
    plan = plan_placement(POLICY, state, NOW, is_asked=is_asked, is_forced=is_asked)
    assert plan.decision == decision, plan.reason
    assert words in (plan.reason if decision == Decision.hold else plan.unparked)


def test_a_parks_load_is_measured_over_the_last_minute():
    state = tightened_pool(topk_group=None)
    busy = [replace(w, index=w.index + 7, start=w.start + 70, expert_tokens=3 * w.expert_tokens)
            for w in state.windows]  # 70 s at three times the rate, after the first 70 s
    recent = replace(state, windows=state.windows + tuple(busy))
    assert recent.knob_inputs(with_expert_share=False).tokens_per_second == pytest.approx(
        3 * state.knob_inputs(with_expert_share=False).tokens_per_second)
