"""MTP acceptance under its floor, diagnosed (controlplane/plan/diagnose.py): scripted pools, one per cause, each
named right; only skew leads to a rebalance, a routing cause to a looser limit, a regression to a rollback."""

from __future__ import annotations

import numpy as np
import pytest

from agents.protocol import PlacementTable, default_slot_to_expert
from controlplane.desired import Decision, Effect, Mode, Policy
from controlplane.observed.knob_change import KnobChange
from controlplane.observed.pool import PoolState
from controlplane.observed.window import ACCEPTED_AT, Window
from controlplane.plan.diagnose import Cause, diagnose_mtp
from controlplane.plan.placement import plan_placement
from controlplane.plan.routing_limit import plan_routing
from tests.support.pool_states import every_rank_reported, loop_window, pool_state, routing_in_force

EP, SPR, LAYERS, EXPERTS = 2, 5, 2, 8
TABLE = default_slot_to_expert(LAYERS, EXPERTS, EP * SPR)  # experts 0 and 1 have a replica on GPU 1
POLICY = Policy(mode=Mode.auto, mtp_acceptance_floor=0.8, imbalance_threshold=1.15, cooldown_seconds=0)
NOW = 1000.0


def acceptance_window(index: int, acceptance: float, *, hot: float = 1.0) -> Window:
    """10 s; 25 tokens per expert but expert 3 of layer 1 (on GPU 0 only) `hot` x that; 1000 drafts of two
    tokens each, position 2 accepted at 0.6x position 1."""
    load = np.full((LAYERS, EXPERTS), 25.0)
    load[1, 3] *= hot
    first = acceptance * 2000 / 1.6
    counters = every_rank_reported(EP) | {
        "spec_drafts": 1000, "spec_draft_tokens": 2000, "spec_accepted_tokens": acceptance * 2000,
        f"{ACCEPTED_AT}0": first, f"{ACCEPTED_AT}1": 0.6 * first, "forward_seconds": 1.0, "dispatch_seconds": 0.4,
        "routing_recall_sum": 0.6, "routing_recall_count": 1}
    return loop_window(index, load, PlacementTable(TABLE).slot_load(load), num_reports=EP, counters=counters)


def acceptance_pool(acceptance: list[float], *, hot: float = 1.0, topk_group: int | None = None,
                    changes: tuple[KnobChange, ...] = ()) -> PoolState:
    return pool_state(TABLE, EXPERTS, (acceptance_window(90 + i, a, hot=hot) for i, a in enumerate(acceptance)),
                      ep=EP, top_k=2, model_topk_group=2, changes=changes,
                      recall_reference=0.8 if topk_group else None,
                      in_force=routing_in_force(topk_group, 0.0 if topk_group else None))


def tightened(at: float, acceptance_before: float = 0.85, status: str = "verified") -> KnobChange:
    return KnobChange(7, "routing", at, status, -1,
                      Effect("all2all_share", -1, 0.4, 0.3, context={"mtp_acceptance": acceptance_before}))


@pytest.mark.parametrize("state, cause", [
    (acceptance_pool([0.5, 0.5], hot=3.0), Cause.skew),  # the mean over layers (1.10) hides layer 1's straggler (1.20)
    (acceptance_pool([0.5, 0.5], topk_group=1), Cause.routing),  # tighter than the model's own 2
    (acceptance_pool([0.9, 0.9, 0.5, 0.5], topk_group=1, changes=(tightened(915.0),)), Cause.regression),
    (acceptance_pool([0.5, 0.5]), Cause.not_load_related),
    # a change long past the flap window, or one acceptance was already low before: not a regression
    (acceptance_pool([0.5, 0.5], changes=(tightened(NOW - 700.0),)), Cause.not_load_related),
    (acceptance_pool([0.5, 0.5], changes=(tightened(915.0, acceptance_before=0.6),)), Cause.not_load_related),
])
def test_each_cause_is_named(state, cause):
    found = diagnose_mtp(POLICY, state, NOW)
    assert found.cause == cause, found.reason
    assert state.windows[-1].imbalance(EP) < POLICY.imbalance_threshold  # the mean over layers would not act
    assert found.evidence["mtp_acceptance"][-1] == pytest.approx(0.5)
    if cause == Cause.regression:
        assert found.action_id == 7 and found.knob == "routing" and "roll it back" in found.reason
    if cause == Cause.not_load_related:
        assert found.evidence["acceptance_by_position"] == pytest.approx([0.625, 0.375])
        assert "by draft position 0.62, 0.38" in found.reason


def test_no_diagnosis_above_the_floor_without_one_or_before_it_is_sustained():
    assert diagnose_mtp(POLICY, acceptance_pool([0.85, 0.85], hot=3.0), NOW) is None
    assert diagnose_mtp(Policy(mode=Mode.auto), acceptance_pool([0.5, 0.5]), NOW) is None
    assert diagnose_mtp(POLICY, acceptance_pool([0.9, 0.5]), NOW) is None


def test_only_skew_leads_to_a_rebalance():
    skewed = acceptance_pool([0.5, 0.5], hot=3.0)
    plan = plan_placement(POLICY, skewed, NOW, mtp=diagnose_mtp(POLICY, skewed, NOW))
    assert plan.decision == Decision.rebalance and "load skew" in plan.reason
    assert plan.change.effect.signal == "imbalance"
    unrelated = acceptance_pool([0.5, 0.5])
    assert plan_placement(POLICY, unrelated, NOW, mtp=diagnose_mtp(POLICY, unrelated, NOW)).decision == Decision.keep


def test_a_routing_cause_loosens_toward_the_models_own_limit():
    state = acceptance_pool([0.5] * 6, topk_group=1)  # a minute of windows: the load is known
    step = plan_routing(POLICY, state, NOW, diagnose_mtp(POLICY, state, NOW))
    assert step.topk_group == 2 and step.effect.signal == "mtp_acceptance" and step.effect.direction == 1
