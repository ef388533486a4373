"""The per-expert capacity factor's planner (controlplane/plan/capacity_factor.py), on plain arrays: a cap only
where the placement cannot relieve the imbalance, loosened when it drops more than the policy allows."""

from __future__ import annotations

from dataclasses import replace

from support.pool_states import skewed_pool

from controlplane.desired import KnobKind, Mode, Policy
from controlplane.observed.knob_change import KnobChange
from controlplane.observed.pool import PoolState
from controlplane.plan.capacity_factor import capped_imbalance, plan_capacity_factor

NOW = 1000.0
POLICY = Policy(mode=Mode.auto, cooldown_seconds=60, max_dropped_share=0.01)


def shape_limited(**kwargs) -> PoolState:
    """One slot per GPU, as DeepSeek's decode pool: 20 slots for 16 experts leave the hot expert (2000 of a layer's
    3500 tokens) at 400 a replica against a mean GPU's 175: no placement gets under 2.29."""
    return skewed_pool(ep=20, slots_per_rank=1, **kwargs)


def test_a_policy_without_a_drop_budget_issues_no_cap():
    step = plan_capacity_factor(POLICY.model_copy(update={"max_dropped_share": None}), shape_limited(), NOW)
    assert step.factor is None and step.effect is None and "not managed" in step.reason


def test_where_the_placement_can_relieve_the_imbalance_no_cap_is_issued():
    step = plan_capacity_factor(POLICY, skewed_pool(), NOW)  # 20 slots on 4 GPUs: the hot expert spreads
    assert step.factor is None and "placement can bring" in step.reason


def test_where_the_shape_is_the_limit_the_cap_tightens_from_the_policys_loosest_predicting_its_effect():
    state = shape_limited()
    step = plan_capacity_factor(POLICY, state, NOW)
    assert step.factor == POLICY.expert_capacity_factor_max, step.reason
    effect = step.effect
    assert (effect.signal, effect.direction) == ("imbalance", -1)
    windows = state.windows[-POLICY.sustained_windows:]
    gain = capped_imbalance(state.placement, windows, 20, None) - capped_imbalance(state.placement, windows, 20, 4.0)
    assert gain >= POLICY.min_gain and effect.predicted == effect.before - gain
    # the next step down, from a cap in force: never under the policy's tightest
    tighter = plan_capacity_factor(POLICY, shape_limited(factor=1.5), NOW)
    assert tighter.factor == POLICY.expert_capacity_factor_min


def test_drops_over_the_budget_loosen_the_cap_and_past_the_loosest_lift_it():
    step = plan_capacity_factor(POLICY, shape_limited(factor=2.0, dropped_share=0.05), NOW)
    assert step.factor == 2.5 and (step.effect.signal, step.effect.direction) == ("dropped_share", -1)
    assert step.effect.predicted < step.effect.before == 0.05
    lifted = plan_capacity_factor(POLICY, shape_limited(factor=4.0, dropped_share=0.05), NOW)
    assert lifted.factor is None


def test_a_step_waits_for_the_verdict_on_the_last_and_never_reverses_one_within_the_flap_window():
    applied = KnobChange(7, KnobKind.expert_capacity, NOW - 100, "applied", -1)
    assert "awaits its verdict" in plan_capacity_factor(POLICY, shape_limited(factor=2.0, dropped_share=0.05,
                                                                              changes=(applied,)), NOW).reason
    tightened = replace(applied, status="verified")
    held = plan_capacity_factor(POLICY, shape_limited(factor=2.0, dropped_share=0.05, changes=(tightened,)), NOW)
    assert held.factor == 2.0 and "flap window" in held.reason
