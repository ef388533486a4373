"""The verify step: an applied change is judged once measured, and what comes of it is written."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from support.pool_states import every_rank_reported, loop_window
from support.store import make_pool

from agents.protocol.placement import PlacementTable
from controlplane.actuate import change
from controlplane.config import Settings
from controlplane.desired import Effect, Mode, Policy
from controlplane.loop.verify import verify_pool
from controlplane.observed.window import Window
from controlplane.store import actions, parks, pools
from controlplane.store.knobs import CAPACITY_FACTOR, PLACEMENT, ROUTING

NOW = 1_800_000_000.0
AUTO = Policy(mode=Mode.auto, verify_windows=2, rollback_tolerance=0.05)


def gpu_window(index: int, version: int, gpu_tokens: tuple[int, int], all2all_share: float = 0.2,
               expert_tokens: np.ndarray | None = None) -> Window:
    """Two GPUs of five slots each; gpu_tokens: what each processed in every layer. expert_tokens: [2, 8] the
    load routed (none by default: then no table can be evaluated on it)."""
    slot_tokens = np.zeros((2, 10))
    slot_tokens[:, 0], slot_tokens[:, 5] = gpu_tokens
    expert_tokens = np.zeros((2, 8)) if expert_tokens is None else expert_tokens
    return loop_window(index, expert_tokens, slot_tokens, version=version, num_reports=2, start=NOW + 10 * index,
                       counters=every_rank_reported(2) | {"forward_seconds": 1.0, "dispatch_seconds": all2all_share})


def state_with(session, deployment, pool, windows):
    state = pools.read_state(session, deployment, pool, now=NOW + 100, settings=Settings(window_seconds=10.0))
    return replace(state, windows=tuple(windows))


@pytest.mark.parametrize("gpu_tokens, status", [((300, 100), "rolled_back"), ((210, 190), "verified")])
def test_a_placement_is_judged_against_the_imbalance_before_it(sessions, gpu_tokens, status):
    with sessions() as session, session.begin():
        deployment, pool = make_pool(session, now=NOW)
        original = PLACEMENT.get(session, pool, 0)
        action = change.propose(session, PLACEMENT, pool, PlacementTable(np.zeros((2, 10), np.int64)),
                                actions.Entry("test", inputs={"measured_imbalance": [1.3, 1.2]}), policy=AUTO, now=NOW)
        verify_pool(session, pool, state_with(session, deployment, pool, [gpu_window(1, 1, gpu_tokens)]), AUTO,
                    NOW + 20)
        assert action.status == "applied"  # one window measured, two needed
        measured = state_with(session, deployment, pool, [gpu_window(1, 1, gpu_tokens), gpu_window(2, 1, gpu_tokens)])
        verify_pool(session, pool, measured, AUTO, NOW + 30)
        assert action.status == status and action.measured["imbalance_before"] == 1.2
        assert action.measured["imbalance_after"] == pytest.approx(max(gpu_tokens) / 200)
        if status == "rolled_back":
            assert action.measured["restored_version"] == 2
            np.testing.assert_array_equal(PLACEMENT.get(session, pool, 2).slot_to_expert, original.slot_to_expert)
        else:
            assert PLACEMENT.latest_version(session, pool) == 1


# the default table puts experts 0-4 on GPU 0 and 5, 6, 7, 0, 1 on GPU 1; the new one 0, 1, 2, 5, 6 and 3, 4, 7, 0, 1
NEW_TABLE = np.array([[0, 1, 2, 5, 6, 3, 4, 7, 0, 1]] * 2, dtype=np.int64)
EVEN = np.full((2, 8), 100.0)  # both tables read 1.0 on it
ON_GPU_0 = np.array([[0, 0, 200, 200, 200, 0, 0, 0]] * 2, dtype=np.float64)  # the default reads 2.0, the new 4/3


@pytest.mark.parametrize("expert_tokens, gpu_tokens, before, status", [
    (ON_GPU_0, (220, 180), 2.0, "verified"),  # measured 1.1: the gain the new table makes on this load, realised
    (ON_GPU_0, (600, 0), 2.0, "rolled_back"),  # measured 2.0: the fleet kept its old table
    (EVEN, (220, 180), 1.0, "rolled_back"),  # the load eased: no table gains anything, and 1.1 is worse than 1.0
])
def test_a_placement_is_judged_on_the_load_it_met(sessions, expert_tokens, gpu_tokens, before, status):
    # planned at 1.2 for 1.2 (no prediction): judged instead on what both tables make of the windows under it
    with sessions() as session, session.begin():
        deployment, pool = make_pool(session, now=NOW)
        action = change.propose(session, PLACEMENT, pool, PlacementTable(NEW_TABLE),
                                actions.Entry("test", inputs={"measured_imbalance": [1.3, 1.2]}), policy=AUTO, now=NOW)
        windows = [gpu_window(i, 1, gpu_tokens, expert_tokens=expert_tokens) for i in (1, 2)]
        verify_pool(session, pool, state_with(session, deployment, pool, windows), AUTO, NOW + 30)
        assert action.status == status, action.measured
        assert action.measured["imbalance_before"] == before and action.measured["imbalance_before_planned"] == 1.2
        assert action.measured["imbalance_after"] == pytest.approx(max(gpu_tokens) / (sum(gpu_tokens) / 2))
        predicted = 1.0 if expert_tokens is EVEN else 4 / 3  # the new table on the windows' load
        assert f"(predicted {predicted:.3f})" in action.measured["verdict"], action.measured


def test_a_window_the_ranks_switched_late_in_is_not_judged(sessions):
    # the ranks switched near the end of window 1: their slot counts (40 tokens) cover little of its expert load
    # (800) and read 1.5 by chance; windows 2 and 3 ran the new table whole
    with sessions() as session, session.begin():
        deployment, pool = make_pool(session, now=NOW)
        action = change.propose(session, PLACEMENT, pool, PlacementTable(NEW_TABLE),
                                actions.Entry("test", inputs={"measured_imbalance": [1.3, 1.2]}), policy=AUTO, now=NOW)
        late = gpu_window(1, 1, (30, 10), expert_tokens=EVEN)
        whole = [gpu_window(i, 1, (410, 390), expert_tokens=EVEN) for i in (2, 3)]
        verify_pool(session, pool, state_with(session, deployment, pool, [late, whole[0]]), AUTO, NOW + 20)
        assert action.status == "applied"  # one window measured whole, two needed
        verify_pool(session, pool, state_with(session, deployment, pool, [late, *whole]), AUTO, NOW + 30)
        assert action.status == "verified", action.measured
        assert action.measured["imbalance_after"] == pytest.approx(410 / 400)


def routing_window(index: int, share: float, recall: float = 1.0) -> Window:
    w = gpu_window(index, 0, (100, 100), all2all_share=share)
    return replace(w, counters=w.counters | {"routing_recall_sum": recall, "routing_recall_count": 1})


def propose_tightening(session, deployment, pool, now: float):
    effect = Effect("all2all_share", -1, before=0.45, predicted=0.3, tolerance=0.01, floors={"routing_recall": 0.9})
    entry = actions.Entry("test", inputs={"all2all_share": [0.4, 0.5]},
                          predicted={"topk_group_before": None, "topk_group_after": 1, "effect": effect.to_json()})
    return change.propose(session, ROUTING, pool, 1, entry, policy=AUTO, now=now)


def test_a_routing_limit_that_had_its_effect_is_verified(sessions):
    with sessions() as session, session.begin():
        deployment, pool = make_pool(session, now=NOW)
        action = propose_tightening(session, deployment, pool, NOW + 5)
        before = routing_window(0, 0.45)  # ran before the change
        verify_pool(session, pool, state_with(session, deployment, pool, [before, routing_window(1, 0.2)]), AUTO,
                    NOW + 20)
        assert action.status == "applied"  # one window under the new limit, two needed
        after = [before, routing_window(1, 0.2), routing_window(2, 0.3)]
        verify_pool(session, pool, state_with(session, deployment, pool, after), AUTO, NOW + 30)
        assert action.status == "verified", action.measured
        assert action.measured["all2all_share_after"] == 0.25 and action.measured["all2all_share_before"] == 0.45
        assert "0.450 -> 0.250 (predicted 0.300)" in action.measured["verdict"]
        assert parks.active(session, pool) == {}


@pytest.mark.parametrize("shares, recall, words", [
    ((0.44, 0.45), 1.0, "did not move as intended"),  # the exchange is not what the limit changes here
    ((0.2, 0.3), 0.8, "routing_recall 0.800 < floor 0.9"),  # it did, at a price the policy refuses
])
def test_a_routing_limit_without_its_effect_is_reverted_and_parked(sessions, shares, recall, words):
    with sessions() as session, session.begin():
        deployment, pool = make_pool(session, now=NOW)
        action = propose_tightening(session, deployment, pool, NOW + 5)
        after = [routing_window(i + 1, share, recall) for i, share in enumerate(shares)]
        verify_pool(session, pool, state_with(session, deployment, pool, after), AUTO, NOW + 30)
        assert action.status == "rolled_back" and words in action.measured["verdict"]
        assert action.measured["parked"] is True and action.measured["restored_version"] == 2
        assert ROUTING.get(session, pool, 2) is None  # the limit before it: the model's own
        parked = parks.active(session, pool)["routing"]
        assert parked.action_id == action.id and words in parked.reason
        assert parked.inputs.policy_version == 1 and parked.inputs.expert_share is None


@pytest.mark.parametrize("gpu_tokens, status", [((230, 170), "verified"), ((300, 100), "rolled_back")])
def test_a_capacity_factor_is_judged_by_the_imbalance_it_aimed_at(sessions, gpu_tokens, status):
    """The cap is one of the knobs verify knows by kind only: judged on the windows since its version, rolled back
    and parked like any when the hot GPU did not shed its load."""
    with sessions() as session, session.begin():
        deployment, pool = make_pool(session, now=NOW)
        effect = Effect("imbalance", -1, 1.5, 1.2, AUTO.rollback_tolerance)
        action = change.propose(session, CAPACITY_FACTOR, pool, 4.0,
                                actions.Entry("test", predicted={"factor_before": None, "factor_after": 4.0,
                                                                 "effect": effect.to_json()}), policy=AUTO, now=NOW + 5)
        before = gpu_window(0, 0, (300, 100))  # ran before the cap: not judged
        after = [before] + [gpu_window(i, 0, gpu_tokens) for i in (1, 2)]
        verify_pool(session, pool, state_with(session, deployment, pool, after), AUTO, NOW + 30)
        assert action.status == status, action.measured
        assert action.measured["imbalance_before"] == 1.5
        assert action.measured["imbalance_after"] == pytest.approx(max(gpu_tokens) / 200)
        if status == "rolled_back":
            assert CAPACITY_FACTOR.get(session, pool, 2) is None and "expert_capacity" in parks.active(session, pool)
