"""The verify step: an applied change is judged once measured, and what comes of it is written."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from support.store import make_pool

from agents.protocol.placement import PlacementTable
from controlplane.actuate import change
from controlplane.actuate.placement import PLACEMENT
from controlplane.actuate.routing import ROUTING
from controlplane.config import Settings
from controlplane.desired import Mode, Policy
from controlplane.observed import RANK_REPORTS, Window
from controlplane.store import pools
from controlplane.verify import verify_pool

NOW = 1_800_000_000.0
AUTO = Policy(mode=Mode.auto, verify_windows=2, rollback_tolerance=0.05)


def window(index: int, version: int, gpu_tokens: tuple[int, int], all2all_share: float = 0.2) -> Window:
    """Two GPUs of five slots each; gpu_tokens: what each processed in every layer."""
    slot_tokens = np.zeros((2, 10))
    slot_tokens[:, 0], slot_tokens[:, 5] = gpu_tokens
    return Window(index=index, start=NOW + 10 * index, seconds=10.0, placement_version=version, num_reports=2,
                  num_slot_reports=2, expert_tokens=np.zeros((2, 8)), slot_tokens=slot_tokens,
                  counters={f"{RANK_REPORTS}0": 1, f"{RANK_REPORTS}1": 1, "forward_seconds": 1.0,
                            "dispatch_seconds": all2all_share})


def state_with(session, deployment, pool, windows):
    state = pools.read_state(session, deployment, pool, now=NOW + 100, settings=Settings(window_seconds=10.0))
    return replace(state, windows=tuple(windows))


@pytest.mark.parametrize("gpu_tokens, status", [((300, 100), "rolled_back"), ((210, 190), "verified")])
def test_a_placement_is_judged_against_the_imbalance_before_it(sessions, gpu_tokens, status):
    with sessions() as session, session.begin():
        deployment, pool = make_pool(session, now=NOW)
        original = PLACEMENT.get(session, pool, 0)
        action = change.propose(session, PLACEMENT, deployment=deployment, pool=pool, policy=AUTO,
                                value=PlacementTable(np.zeros((2, 10), np.int64)), reason="test",
                                inputs={"measured_imbalance": [1.3, 1.2]}, predicted={}, trigger="loop",
                                created_by="loop", now=NOW)
        verify_pool(session, pool, state_with(session, deployment, pool, [window(1, 1, gpu_tokens)]), AUTO, NOW + 20)
        assert action.status == "applied"  # one window measured, two needed
        measured = state_with(session, deployment, pool, [window(1, 1, gpu_tokens), window(2, 1, gpu_tokens)])
        verify_pool(session, pool, measured, AUTO, NOW + 30)
        assert action.status == status and action.measured["imbalance_before"] == 1.2
        assert action.measured["imbalance_after"] == pytest.approx(max(gpu_tokens) / 200)
        if status == "rolled_back":
            assert action.measured["restored_version"] == 2
            np.testing.assert_array_equal(PLACEMENT.get(session, pool, 2).slot_to_expert, original.slot_to_expert)
        else:
            assert PLACEMENT.latest_version(session, pool) == 1


def test_a_routing_limit_records_the_all2all_share_under_it(sessions):
    with sessions() as session, session.begin():
        deployment, pool = make_pool(session, now=NOW)
        action = change.propose(session, ROUTING, deployment=deployment, pool=pool, policy=AUTO, value=1,
                                reason="test", inputs={"all2all_share": [0.4, 0.5]}, trigger="loop",
                                predicted={"topk_group_after": 1}, created_by="loop", now=NOW + 5)
        before = window(0, 0, (100, 100), all2all_share=0.45)  # ran before the change
        verify_pool(session, pool, state_with(session, deployment, pool, [before, window(1, 0, (100, 100))]), AUTO,
                    NOW + 20)
        assert action.status == "applied"
        after = [before, window(1, 0, (100, 100), 0.2), window(2, 0, (100, 100), 0.3)]
        verify_pool(session, pool, state_with(session, deployment, pool, after), AUTO, NOW + 30)
        assert action.status == "verified"
        assert action.measured == {"all2all_share_after": 0.25, "all2all_share_before": 0.45}
