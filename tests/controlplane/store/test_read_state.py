"""What the planner sees of a pool: the issued versions of each knob, complete windows only, and the
hour's budgets."""

from __future__ import annotations

import numpy as np
from support.store import make_pool, snapshot

from agents.protocol.placement import PlacementTable
from controlplane.collect.aggregate import to_report
from controlplane.config import Settings
from controlplane.store import actions, deployments, pools, windows
from controlplane.store.knobs import PLACEMENT, ROUTING

NOW = 1_800_000_000.0
SETTINGS = Settings(window_seconds=10.0)


def test_the_routing_limit_is_the_latest_version_and_changed_when_it_was_made(sessions):
    with sessions() as session, session.begin():
        deployment, pool = make_pool(session, now=NOW)
        state = pools.read_state(session, deployment, pool, now=NOW, settings=SETTINGS)
        assert (state.topk_group, state.routing_changed_at) == (None, None)  # version 0 is no change
        ROUTING.versions.add(session, pool=pool, version=1, value=1, action_id=None, now=NOW + 30)
        state = pools.read_state(session, deployment, pool, now=NOW + 40, settings=SETTINGS)
        assert (state.topk_group, state.routing_changed_at) == (1, NOW + 30)


def test_a_window_is_read_once_half_a_window_has_passed_after_it(sessions):
    with sessions() as session, session.begin():
        deployment, pool = make_pool(session, now=NOW)
        report = to_report(snapshot(window_start=NOW, rank=0), 10.0)
        windows.add_report(session, pool=pool, report=report, current_version=0, grid_seconds=10.0,
                           empty=deployments.zeros_for(deployment, pool))
        assert pools.read_state(session, deployment, pool, now=NOW + 14.9, settings=SETTINGS).windows == ()
        [window] = pools.read_state(session, deployment, pool, now=NOW + 15.1, settings=SETTINGS).windows
        assert window.index == report.window_index


def test_the_hours_budgets_count_moved_slots_and_applied_changes(sessions):
    with sessions() as session, session.begin():
        deployment, pool = make_pool(session, now=NOW)
        table = PLACEMENT.versions.latest(session, pool).value.slot_to_expert.copy()
        table[:, :3] = 7  # three slots of each of two layers
        PLACEMENT.versions.add(session, pool=pool, version=1, value=PlacementTable(table), action_id=None,
                               now=NOW + 100)
        for status in ("applied", "verified", "rolled_back", "planned", "rejected"):
            actions.record(session, pool, actions.Entry(""), kind="placement", mode="auto", status=status,
                           now=NOW + 100)
        state = pools.read_state(session, deployment, pool, now=NOW + 200, settings=SETTINGS)
        assert (state.moved_slots_last_hour, state.num_actions_last_hour) == (6, 3)
        assert state.placement_version == 1 and state.last_change_at == NOW + 100
        np.testing.assert_array_equal(state.slot_to_expert, table)
        later = pools.read_state(session, deployment, pool, now=NOW + 3701, settings=SETTINGS)
        assert (later.moved_slots_last_hour, later.num_actions_last_hour) == (0, 0)
