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
    from agents.sim.fleet import FleetClient
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


def test_a_change_that_made_things_worse_is_rolled_back(client, sessions, settings, clock):
    import numpy as np

    from controlplane import decisions
    from controlplane.desired import Decision, PlacementChange, Plan, Policy
    from controlplane.store import deployments, pools

    fleet = start_fleet(client, {"mode": "off"})
    run_windows(client, sessions, settings, clock, fleet, 3, reconcile=False)
    with sessions() as session, session.begin():
        deployment = deployments.get(session, "sim-0")
        pool = deployments.pools_of(session, deployment)[0]
        state = pools.read_state(session, deployment, pool, now=clock.now + 6, settings=settings)
        prior = state.windows[-1].imbalance(state.ep_size)
        # a bad plan: each layer's ten hottest experts all on GPU 0, spare slots on lukewarm experts
        order = np.argsort(-state.windows[-1].expert_tokens, axis=1)  # [L, E] hottest first
        table = np.concatenate([order, order[:, 10:26]], axis=1)  # slots 64..79 repeat ranks 10..25
        change = PlacementChange(table, None, prior, 1.0, int((table != state.slot_to_expert).sum()))
        plan = Plan("sim-0", "decode", Decision.rebalance, "a deliberately bad plan",
                    {"measured_imbalance": [prior]}, change)
        action = decisions.record_plan(session, deployment=deployment, pool=pool, state=state,
                                       policy=Policy(mode="auto"), plan=plan, trigger="manual", created_by="test",
                                       now=clock.now)
        assert action.status == "applied" and np.any(table != state.slot_to_expert)
    client.put("/v1/deployments/sim-0/policy", json={"mode": "auto", "imbalance_threshold": 100,
                                                     "rollback_tolerance": 0.05},
               headers={"Authorization": "Bearer test-operator-token"})
    overviews = run_windows(client, sessions, settings, clock, fleet, 5)
    [rolled] = [a for a in overviews[-1]["last_actions"] if a["reason"] == "a deliberately bad plan"]
    assert rolled["status"] == "rolled_back", (rolled["measured"], prior)
    assert rolled["measured"]["imbalance_after"] > prior + 0.05
    assert rolled["measured"]["restored_version"] == 2 and fleet[0].placement_version == 2
    np.testing.assert_array_equal(fleet[0].slot_to_expert, state.slot_to_expert)


def test_prefix_hits_under_the_floor_are_recorded_once_not_acted_on(client, sessions, settings, clock):
    # the simulator hits ~55% of prefix tokens: a 0.8 floor is missed every window
    fleet = start_fleet(client, {"mode": "auto", "prefix_hit_floor": 0.8, "imbalance_threshold": 100})
    overviews = run_windows(client, sessions, settings, clock, fleet, 5)
    findings = [a for a in overviews[-1]["last_actions"] if a["kind"] == "diagnosis"]
    assert len(findings) == 1 and findings[0]["status"] == "recorded"
    assert "prefix hit ratio 0.5" in findings[0]["reason"] and fleet[0].placement_version == 0
