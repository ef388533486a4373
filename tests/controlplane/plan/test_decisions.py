"""A pool's whole plan for one pass (controlplane/plan/decisions.py), on the planner's usual skewed pool: every
knob of the registry (plan/knob_plans.py) decided in its order, the knobs after the placement waiting while it
moves, and the moves asked knob by knob."""

from __future__ import annotations

from support.pool_states import skewed_pool

from controlplane.config import Settings
from controlplane.desired import Decision, KnobKind, Mode, Policy
from controlplane.plan.decisions import decide
from controlplane.plan.knob_plans import KIND_TO_PLAN, KNOB_PLANS
from controlplane.plan.pool_inputs import PoolInputs

AUTO = Policy(mode=Mode.auto, cooldown_seconds=0, max_moved_slots_fraction=1.0, max_dropped_share=0.01)
STATE = skewed_pool(6)  # expert 0 of every layer 20x the others: the placement rebalances


def test_the_placement_is_decided_first_and_the_knobs_after_it_wait_while_it_moves():
    assert KNOB_PLANS[0].kind == KnobKind.placement and set(KIND_TO_PLAN) == {p.kind for p in KNOB_PLANS}
    decisions = decide(AUTO, PoolInputs(STATE, pools=None), Settings(), now=1000.0)
    assert list(decisions.steps) == [plan.kind for plan in KNOB_PLANS]
    assert decisions.placement.decision == Decision.rebalance, decisions.placement.reason
    # one change of the pool's imbalance per pass: the routing limit and the capacity factor are not planned
    assert decisions.steps[KnobKind.routing] is None and decisions.steps[KnobKind.expert_capacity] is None
    assert decisions.pool_plan is None  # no pool planner sizes this deployment
    moves = decisions.moves(AUTO, STATE, "decode")
    assert [m.kind for m in moves] == [KnobKind.placement]
    assert (moves[0].value.slot_to_expert == decisions.placement.change.slot_to_expert).all()
    assert decisions.reach.reason == "no group limit in force" and decisions.unparked() == {}


def test_a_policy_that_is_off_decides_every_knob_and_moves_none():
    off = Policy(mode=Mode.off)
    decisions = decide(off, PoolInputs(STATE, pools=None), Settings(), now=1000.0)
    assert decisions.placement.decision == Decision.keep and decisions.placement.reason == "policy mode is off"
    assert decisions.steps[KnobKind.routing].reason == "routing limits are not managed by this policy"
    assert decisions.moves(off, STATE, "decode") == []
