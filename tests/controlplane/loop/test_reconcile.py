"""The loop's shell: dry runs write nothing, a failing pool does not stop the others, spans are emitted."""

from __future__ import annotations

import numpy as np
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from sqlalchemy import func, select
from support.fleet import run_windows, start_fleet
from support.placements import BAD_PLAN, fleet_on_a_bad_placement

from controlplane.loop.reconcile import Reconciler
from controlplane.store.tables import Action, Placement


def counts(sessions) -> tuple[int, int]:
    with sessions() as session:
        return (session.scalar(select(func.count()).select_from(Action)),
                session.scalar(select(func.count()).select_from(Placement)))


def test_dry_run_plans_and_writes_nothing(client, sessions, settings, clock):
    fleet = start_fleet(client, {"mode": "auto", "cooldown_seconds": 0})
    run_windows(client, sessions, settings, clock, fleet, 3, reconcile=False)
    before = counts(sessions)
    result = Reconciler(settings).run_pass(sessions, now=clock.now + settings.window_seconds, dry_run=True)
    assert [p.decision.value for p in result.plans] == ["rebalance"]
    assert counts(sessions) == before


def test_spans_follow_the_phases_of_the_pass(client, sessions, settings, clock):
    fleet = start_fleet(client, {"mode": "auto", "cooldown_seconds": 0})
    run_windows(client, sessions, settings, clock, fleet, 3, reconcile=False)
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    Reconciler(settings, tracer=provider.get_tracer("t")).run_pass(sessions, now=clock.now + settings.window_seconds)
    names = [s.name for s in exporter.get_finished_spans()]
    # on SQLite the pool is planned before its lock, the database's one write lock, is taken (plan_ahead.py)
    ahead = ["reconcile.plan_ahead"] if settings.database_url.startswith("sqlite") else []
    assert names == ahead + ["settle", "read", "decide", "write", "answer", "reconcile.pool",
                             "reconcile.pass"]
    pool_span = next(s for s in exporter.get_finished_spans() if s.name == "reconcile.pool")
    assert pool_span.attributes["moectl.decision"] == "rebalance"


def test_a_broken_pool_is_isolated(client, sessions, settings, clock, monkeypatch):
    fleets = [start_fleet(client, {"mode": "auto", "cooldown_seconds": 0}, seed=s) for s in (1, 2)]
    fleets[1][0].deployment = "sim-b"  # a second deployment
    from agents.sim.fleet_client import FleetClient
    FleetClient(client, api_token="test-operator-token", agent_token="test-agent-token").register(fleets[1])
    run_windows(client, sessions, settings, clock, fleets[0] + fleets[1], 3, reconcile=False)
    import controlplane.plan.placement as placement

    real = placement.plan_placement

    def flaky(policy, state, now, **kwargs):
        if state.deployment == "sim-b":
            raise RuntimeError("boom")
        return real(policy, state, now, **kwargs)

    monkeypatch.setattr(placement, "plan_placement", flaky)
    result = Reconciler(settings).run_pass(sessions, now=clock.now + settings.window_seconds)
    assert result.num_errors == 1 and [p.deployment for p in result.plans] == ["sim-0"]


def test_a_change_that_made_things_worse_is_rolled_back(client, sessions, settings, clock):
    fleet, bad = fleet_on_a_bad_placement(client, sessions, settings, clock, {
        "mode": "auto", "imbalance_threshold": 100, "rollback_tolerance": 0.05})
    overviews = run_windows(client, sessions, settings, clock, fleet, 5)
    [rolled] = [a for a in overviews[-1]["last_actions"] if a["reason"] == BAD_PLAN]
    assert rolled["status"] == "rolled_back", (rolled["measured"], bad.prior)
    assert rolled["measured"]["imbalance_after"] > bad.prior + 0.05
    assert rolled["measured"]["restored_version"] == 2 and fleet[0].placement_version == 2
    np.testing.assert_array_equal(fleet[0].slot_to_expert, bad.replaced)


def test_prefix_hits_under_the_floor_are_recorded_once_not_acted_on(client, sessions, settings, clock):
    # the simulator hits ~55% of prefix tokens: a 0.8 floor is missed every window
    fleet = start_fleet(client, {"mode": "auto", "prefix_hit_floor": 0.8, "imbalance_threshold": 100})
    overviews = run_windows(client, sessions, settings, clock, fleet, 5)
    findings = [a for a in overviews[-1]["last_actions"] if a["kind"] == "diagnosis"]
    assert len(findings) == 1 and findings[0]["status"] == "recorded"
    assert "prefix hit ratio 0.5" in findings[0]["reason"] and fleet[0].placement_version == 0
