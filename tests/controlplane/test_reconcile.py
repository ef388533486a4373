"""The loop's shell: dry runs write nothing, a failing pool does not stop the others, spans are emitted."""

from __future__ import annotations

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from sqlalchemy import func, select
from support.fleet import run_windows, start_fleet

from controlplane.reconcile import reconcile_once
from controlplane.store.tables import Action, Placement


def counts(sessions) -> tuple[int, int]:
    with sessions() as session:
        return (session.scalar(select(func.count()).select_from(Action)),
                session.scalar(select(func.count()).select_from(Placement)))


def test_dry_run_plans_and_writes_nothing(client, sessions, settings, clock):
    fleet = start_fleet(client, {"mode": "auto", "cooldown_seconds": 0})
    run_windows(client, sessions, settings, clock, fleet, 3, reconcile=False)
    before = counts(sessions)
    result = reconcile_once(sessions, settings, now=clock.now + settings.window_seconds, dry_run=True)
    assert [p.decision.value for p in result.plans] == ["rebalance"]
    assert counts(sessions) == before


def test_spans_follow_collect_plan_actuate(client, sessions, settings, clock):
    fleet = start_fleet(client, {"mode": "auto", "cooldown_seconds": 0})
    run_windows(client, sessions, settings, clock, fleet, 3, reconcile=False)
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    reconcile_once(sessions, settings, now=clock.now + settings.window_seconds, tracer=provider.get_tracer("t"))
    names = [s.name for s in exporter.get_finished_spans()]
    assert names == ["collect", "verify", "plan", "actuate", "reconcile.pool", "reconcile.pass"]
    pool_span = next(s for s in exporter.get_finished_spans() if s.name == "reconcile.pool")
    assert pool_span.attributes["moectl.decision"] == "rebalance"


def test_a_broken_pool_is_isolated(client, sessions, settings, clock, monkeypatch):
    fleets = [start_fleet(client, {"mode": "auto", "cooldown_seconds": 0}, seed=s) for s in (1, 2)]
    fleets[1][0].deployment = "sim-b"  # a second deployment
    from controlplane.sim.fleet import FleetClient
    FleetClient(client, api_token="test-operator-token", agent_token="test-agent-token").register(fleets[1])
    run_windows(client, sessions, settings, clock, fleets[0] + fleets[1], 3, reconcile=False)
    import controlplane.reconcile as reconcile

    real = reconcile.plan_pool

    def flaky(policy, state, now, **kwargs):
        if state.deployment == "sim-b":
            raise RuntimeError("boom")
        return real(policy, state, now, **kwargs)

    monkeypatch.setattr(reconcile, "plan_pool", flaky)
    result = reconcile_once(sessions, settings, now=clock.now + settings.window_seconds)
    assert result.num_errors == 1 and [p.deployment for p in result.plans] == ["sim-0"]
