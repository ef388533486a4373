"""The pruning job deletes what is past its retention and never what is in force: the latest versions, the
versions open actions need (a rollback's, a waiting proposal's), open actions, the newest action of a pool
and knob, pending requests, and nothing of the last hour. Bounded per run; `moectl prune` finishes the job."""

from __future__ import annotations

import numpy as np
import pytest
from sqlalchemy import func, select, text
from support.store import make_pool, snapshot

from agents.protocol.placement import PlacementTable
from controlplane.actuate import change
from controlplane.actuate.scale import APPLIED
from controlplane.collect.aggregate import to_report
from controlplane.desired import Mode, Policy, VerifyOutcome
from controlplane.loop.prune import Pruning, prune_all
from controlplane.observed.knob_park import KnobInputs
from controlplane.store import actions, alerts, audit, deployments, parks, requests, serving, windows
from controlplane.store.knobs import PLACEMENT, POOL_SIZE
from controlplane.store.observed_tables import Agent, LoadWindow, ReplicaWindow, RouterWindow
from controlplane.store.tables import Action, AlertEvent, AuditEvent, Deployment, KnobPark, Placement, Pool, Request

T0 = 1_800_000_000.0
DAY = 86400.0


def table(seed: int) -> PlacementTable:
    rng = np.random.default_rng(seed)
    return PlacementTable(rng.integers(0, 8, (2, 10)))


def propose(session, deployment, pool, seed: int, mode: Mode, now: float) -> Action:
    return change.propose(session, PLACEMENT, pool, table(seed), actions.Entry("test"), policy=Policy(mode=mode),
                          now=now)


def count(session, row) -> int:
    return session.scalar(select(func.count()).select_from(row))


def fill(sessions, settings) -> dict[str, int]:
    """Ten days of history on one pool; returns the action ids the job must keep."""
    with sessions() as session, session.begin():
        deployment, pool = make_pool(session, now=T0)
        applied = [propose(session, deployment, pool, v, Mode.auto, T0 + v * 1000) for v in range(1, 4)]  # v1-v3
        waiting = propose(session, deployment, pool, 9, Mode.approve, T0 + 3500)  # planned against v3
        applied += [propose(session, deployment, pool, v, Mode.auto, T0 + v * 1000) for v in range(4, 7)]  # v4-v6
        for action in applied[:4]:  # v1-v4 verified; v5 and v6 still applied, awaiting verification
            change.settle(session, PLACEMENT, pool=pool, action=action, outcome=VerifyOutcome.verified,
                          measured={}, now=T0 + 7000)
        now = T0 + 10 * DAY
        recent = propose(session, deployment, pool, 7, Mode.observe, now - 600)  # planned 10 minutes ago
        actions.settle(recent, status=actions.REJECTED, measured={}, now=now - 600)
        for i, handled in enumerate((T0, None, now - 600)):
            request = requests.record(session, pool, requests.Ask("placement", "alert", "am"), now=T0 + i)
            if handled is not None:
                requests.settle(request, outcome="done", action_id=None, now=handled)
        for i, received in enumerate((T0, now - 600)):
            alerts.record(session, alerts.Received(f"f{i}", "s", "firing", "A"), deployment="tiny", outcome="done",
                          now=received)
        for rank, last_seen in ((0, T0), (1, now - 600)):
            deployments.record_agents(session, pool=pool, instance=snapshot(window_start=T0).identity.instance,
                                      seen=[deployments.AgentSeen(rank, 0)], window_index=1, now=last_seen)
        audit.record(session, verb="delete_agents", deployment="tiny", detail={}, created_by="a", now=T0)
        inputs = KnobInputs("m", 1, 100.0)
        parks.park(session, pool=pool, knob="placement", action_id=None, reason="old", inputs=inputs, now=T0)
        parks.park(session, pool=pool, knob="placement", action_id=None, reason="stands", inputs=inputs, now=T0 + 1)
        for index in range(settings.history_windows + 10):
            report = to_report(snapshot(window_start=T0 + 10 * index), settings.window_seconds)
            windows.add_report(session, pool=pool, report=report, current_version=0,
                               grid_seconds=settings.window_seconds, empty=deployments.zeros_for(deployment, pool))
            serving.add_replica_report(session, pool=pool, instance="tiny-decode-0", window_index=index,
                                       age_windows=index, counters={"busy_seconds": 1.0})
            serving.add_router_window(session, deployment=deployment, router="router-0", window_index=index,
                                      window_seconds=settings.window_seconds, counters={"num_arrivals": 1.0})
        return {"waiting": waiting.id, "v5": applied[4].id, "v6": applied[5].id, "recent": recent.id}


def test_the_job_deletes_the_old_and_keeps_what_is_in_force(sessions, settings):
    settings = settings.model_copy(update={"retain_versions_seconds": DAY, "retain_actions_seconds": DAY,
                                           "retain_requests_seconds": DAY, "retain_alert_events_seconds": DAY,
                                           "retain_agents_seconds": DAY, "retain_audit_seconds": DAY})
    kept = fill(sessions, settings)
    pruned = prune_all(sessions, settings, now=T0 + 10 * DAY)
    with sessions() as session:
        versions = sorted(session.scalars(select(Placement.version)))
        # v6 in force; v5 and v4: an applied action's and the one a rollback would issue; v3: the waiting
        # proposal's; v0-v2 go
        assert versions == [3, 4, 5, 6], versions
        assert sorted(session.scalars(select(Action.id))) == sorted(kept.values())
        assert [r.handled_at is None for r in session.scalars(select(Request))] == [True, False]
        assert list(session.scalars(select(AlertEvent.fingerprint))) == ["f1"]
        assert list(session.scalars(select(Agent.rank))) == [1]
        assert count(session, AuditEvent) == 0
        assert [p.reason for p in session.scalars(select(KnobPark))] == ["stands"]  # released ones go
        assert count(session, LoadWindow) == settings.history_windows + 2
        # serving windows as load windows: the newest history_windows complete ones and the two still filling
        for row in (ReplicaWindow, RouterWindow):
            assert sorted(session.scalars(select(row.window_index))) == list(range(8, settings.history_windows + 10))
    assert pruned == {"load_windows": 8, "replica_windows": 8, "router_windows": 8, "placement_versions": 3,
                      "routing_versions": 0, "pool_size_versions": 0, "local_prefill_threshold_versions": 0,
                      "expert_capacity_versions": 0,
                      "actions": 4, "requests": 1, "alert_events": 1, "agents": 1, "audit_events": 1,
                      "knob_parks": 1}

    with sessions() as session, session.begin():  # what the job kept still works: v6 rolls back to v5
        action = session.get(Action, kept["v6"])
        [pool] = deployments.pools_of(session, deployments.get(session, "tiny"))
        change.settle(session, PLACEMENT, pool=pool, action=action, outcome=VerifyOutcome.rolled_back, measured={},
                      now=T0 + 10 * DAY)
        assert action.measured["restored_version"] == 7
        restored = PLACEMENT.versions.latest(session, pool).value
        original = PLACEMENT.versions.get(session, pool, 5).value
        np.testing.assert_array_equal(restored.slot_to_expert, original.slot_to_expert)


def test_each_loop_run_is_bounded_and_paced(sessions, settings):
    settings = settings.model_copy(update={"retain_versions_seconds": DAY, "retain_actions_seconds": DAY,
                                           "max_prune_rows": 1, "prune_seconds": 60.0})
    fill(sessions, settings)
    pruning, now = Pruning(settings), T0 + 10 * DAY
    first = pruning.run_if_due(sessions, now=now)
    assert max(first.values()) == 1 and first["load_windows"] == 1, first
    assert pruning.run_if_due(sessions, now=now + 30) is None  # not due yet
    assert pruning.run_if_due(sessions, now=now + 60)["actions"] == 1
    prune_all(sessions, settings, now=now + 60)
    with sessions() as session:
        assert sorted(session.scalars(select(Placement.version))) == [3, 4, 5, 6]


def test_nothing_of_the_last_hour_goes_whatever_the_settings(sessions, settings):
    retain = {name: 1.0 for name in type(settings).model_fields if name.startswith("retain_")}
    settings = settings.model_copy(update=retain)
    kept = fill(sessions, settings)
    prune_all(sessions, settings, now=T0 + 10 * DAY)
    with sessions() as session:
        assert kept["recent"] in set(session.scalars(select(Action.id)))
        assert [r.handled_at is None for r in session.scalars(select(Request))] == [True, False]
        assert list(session.scalars(select(AlertEvent.fingerprint))) == ["f1"]
        assert list(session.scalars(select(Agent.rank))) == [1]


def test_a_pool_size_conflict_and_the_last_size_applied_stay(sessions, settings):
    """moectl stands down while a conflict is open, and measures other writers against the size it last
    applied (actuate/scale.py): neither may go, however old."""
    with sessions() as session, session.begin():
        deployment, pool = make_pool(session, now=T0)

        def size_action(status: str, measured: dict, at: float) -> int:
            action = actions.record(session, pool, actions.Entry("test", trigger="manual", created_by="alice"),
                                    kind=POOL_SIZE.kind, mode="auto", status=status, now=at)
            action.measured = measured
            return action.id

        earlier = size_action(actions.VERIFIED, {APPLIED: 2}, T0)
        applied = size_action(actions.VERIFIED, {APPLIED: 3}, T0 + 10)
        conflict = size_action(actions.CONFLICT, {}, T0 + 20)
        newest = size_action(actions.PLANNED, {}, T0 + 30)  # observe mode: nothing applied
    prune_all(sessions, settings, now=T0 + 100 * DAY)
    with sessions() as session:
        assert sorted(session.scalars(select(Action.id))) == [applied, conflict, newest]
        assert earlier not in set(session.scalars(select(Action.id)))


def test_the_space_of_pruned_windows_is_reused_so_the_database_stops_growing(sessions, settings):
    """Windows come and go every pass; on PostgreSQL the pruning job vacuums their table, so the next windows
    take the space the pruned ones left instead of growing the table until autovacuum comes."""
    if not settings.database_url.startswith("postgresql"):
        pytest.skip("SQLite reuses freed pages by itself")
    kept = settings.model_copy(update={"history_windows": 10})
    with sessions() as session, session.begin():
        deployment, pool = make_pool(session, now=T0)
    sizes = []
    for round_ in range(8):
        with sessions() as session, session.begin():
            pool = session.get(type(pool), pool.id)
            for i in range(100):
                start = T0 + 10.0 * (100 * round_ + i)
                windows.add_report(session, pool=pool, report=to_report(snapshot(window_start=start, seed=i), 10.0),
                                   current_version=0, grid_seconds=10.0, empty=deployments.zeros_for(deployment, pool))
        prune_all(sessions, kept, now=T0 + 1000.0 * (round_ + 1))
        with sessions() as session:
            sizes.append(session.scalar(select(func.pg_relation_size("load_windows"))))
    assert max(sizes[3:]) <= max(sizes[:3]), sizes  # level after the first rounds (without the vacuum: growing)


def test_a_table_is_vacuumed_once_its_dead_rows_reach_its_live_ones_not_every_run(sessions, settings):
    """VACUUM scans the whole table: a run that deleted a few windows of a large table leaves it to a later run,
    and one that left as many dead rows as live ones vacuums it."""
    if not settings.database_url.startswith("postgresql"):
        pytest.skip("SQLite reuses freed pages by itself")
    kept = settings.model_copy(update={"history_windows": 100})

    def vacuums() -> int:
        with sessions() as session:
            return session.scalar(select(text("vacuum_count")).select_from(text("pg_stat_user_tables"))
                                  .where(text("relname = 'load_windows'")))

    def add_windows(first: int, count: int) -> None:
        with sessions() as session, session.begin():
            deployment, pool = session.get(Deployment, deployment_id), session.get(Pool, pool_id)
            for i in range(first, first + count):
                windows.add_report(session, pool=pool, report=to_report(snapshot(window_start=T0 + 10.0 * i), 10.0),
                                   current_version=0, grid_seconds=10.0, empty=deployments.zeros_for(deployment, pool))

    with sessions() as session, session.begin():
        deployment, pool = make_pool(session, now=T0)
        deployment_id, pool_id = deployment.id, pool.id
    add_windows(0, 105)  # 102 kept (100 complete, 2 filling): 3 deleted
    before = vacuums()
    prune_all(sessions, kept, now=T0 + DAY)
    assert vacuums() == before
    add_windows(105, 150)  # 150 more deleted: more dead rows than live ones
    prune_all(sessions, kept, now=T0 + 2 * DAY)
    assert vacuums() == before + 1
