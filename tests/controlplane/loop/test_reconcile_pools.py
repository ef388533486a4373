"""The pool planner in the one reconcile path: windows posted by the agents and the router, a pass plans both
pools of the PD deployment, and what it decides is written by the one writer: an action with its reason and
predicted effect under the policy's mode, one in flight at a time, and the plan people read."""

from __future__ import annotations

import json

import pytest
from sqlalchemy import select
from support.auth import agent, operator
from support.serving_windows import WINDOW, post_window, prompt_buckets, router_window_body
from support.store import MODEL

from controlplane.cmd.status import render_pools
from controlplane.loop import reconcile_pools
from controlplane.loop.reconcile import Reconciler
from controlplane.solve.pools.planner import is_predictive_tick
from controlplane.store import deployments
from controlplane.store.knobs import POOL_SIZE, PREFILL_THRESHOLD
from controlplane.store.tables import Action

POLICY = {"mode": "auto", "cooldown_seconds": 0, "slo": {"ttft_p90_seconds": 1.0, "itl_p90_seconds": 0.05},
          "replicas": {"prefill": {"min": 1, "max": 2}, "decode": {"min": 1, "max": 3}},
          "pool_cooldown_seconds": 120, "pool_predictive_interval_seconds": 60}


def register(client, **policy) -> None:
    answer = client.put("/v1/deployments/tiny", json={"model": MODEL.model_dump(), "policy": POLICY | policy},
                        headers=operator())
    assert answer.status_code == 200, answer.text


def windows(client, clock, count: int, **kwargs) -> None:
    """`count` windows ending now; the clock then sits half a window past the last one, so it is complete."""
    start = (clock.now // WINDOW) * WINDOW
    for i in range(count):
        post_window(client, start + i * WINDOW, **kwargs)
        clock.now = start + (i + 1.5) * WINDOW


def size_actions(sessions, kind: str = "pool_size") -> list[Action]:
    with sessions() as session:
        return list(session.scalars(select(Action).where(Action.kind == kind).order_by(Action.id)))


def off_tick(clock) -> None:
    """Moves the clock to a window that is not a predictive step (the reactive rules only)."""
    while is_predictive_tick(clock.now, WINDOW, POLICY["pool_predictive_interval_seconds"]):
        clock.now += WINDOW


def test_a_sustained_itl_breach_adds_a_decode_replica_once(client, clock, sessions, settings):
    register(client)
    windows(client, clock, 4, itl=0.03)
    windows(client, clock, 3, itl=0.09)  # over the 50 ms target in every window: the decode pool's breach
    off_tick(clock)
    result = Reconciler(settings).run_pass(sessions, now=clock.now)
    assert result.num_errors == 0 and set(result.pool_plans) == {"tiny"}
    [action] = size_actions(sessions)
    with sessions() as session:
        decode = deployments.get_pool(session, deployments.get(session, "tiny"), "decode")
        assert action.pool_id == decode.id and POOL_SIZE.versions.latest(session, decode).value == 2
    assert (action.status, action.trigger, action.created_by) == ("applied", "loop", "loop")
    assert action.reason == "reactive: measured itl_p90 0.090s > 0.050s"
    assert action.predicted["replicas_before"] == 1 and action.predicted["replicas_after"] == 2
    assert action.inputs["kind"] == "reactive" and action.inputs["measured"]["itl_p90"] == pytest.approx(0.09)
    # the load it was sized for comes back with the planner's history (a consolidation it undoes is not repeated
    # at that load: controlplane/solve/pools/undone.py)
    assert action.inputs["request_rate"] == pytest.approx(5.0)
    with sessions() as session:
        pools = {role: deployments.get_pool(session, deployments.get(session, "tiny"), role)
                 for role in ("prefill", "decode")}
        [seen] = [d for d in reconcile_pools._size_history(session, pools) if d.direction]
        assert (seen.role, seen.target, seen.request_rate) == ("decode", 2, pytest.approx(5.0))
    # the breach goes on while the replica starts: the action in flight is not doubled
    windows(client, clock, 1, itl=0.09)
    off_tick(clock)
    Reconciler(settings).run_pass(sessions, now=clock.now)
    assert len(size_actions(sessions)) == 1
    overview = client.get("/v1/deployments/tiny/overview").json()
    plan = overview["pool_plan"]
    decode_plan = next(p for p in plan["pools"] if p["role"] == "decode")
    assert decode_plan["replicas"] == 2 and decode_plan["ready"] == 1 and decode_plan["starting"] == 1
    assert plan["slo"] == {"ttft_p90": 1.0, "itl_p90": 0.05} and plan["measured"]["itl_p90"] == pytest.approx(0.09)
    assert plan["measured"]["request_rate"] == pytest.approx(5.0) and plan["threshold"]["tokens"] == 256
    assert [p["decision"]["kind"] for p in plan["pools"]] == ["keep", "hold"]
    assert len(overview["pool_history"]) == 8 and overview["pool_history"][-1]["replicas"] == {"prefill": 1,
                                                                                                "decode": 1}
    lines = render_pools(overview)
    assert lines[0] == "  pools: prefill 1 (1 ready; 1..2) · decode 2 (1 ready, 1 starting; 1..3)"
    assert "itl_p90 0.090s/0.050s" in lines[1] and "local prefill < 256 tokens" in lines[1]
    # the router counts no prompt lengths: the prefill pool is sized from the mean prompt
    assert plan["load"]["prefill_sized_by"] == "mean prompt" and "prefill by mean prompt" in lines[1]
    assert "last scaling:" in lines[-1] and "1->2 replicas applied: reactive" in lines[-1]


@pytest.mark.parametrize("by_mix, sized_by", [(True, "prompt-length mix"), (False, "mean prompt")])
def test_the_plan_says_which_model_sized_the_prefill_pool(client, clock, sessions, settings, by_mix, sized_by):
    # the router counts prompt lengths (50 arrivals a window, all of 129-256 tokens): by default the prefill pool is
    # sized from that mix; a policy that turns it off sizes it from the mean prompt all the same
    register(client, pool_size_prefill_by_mix=by_mix)
    windows(client, clock, 4, prompt_buckets=prompt_buckets(b2=50))
    off_tick(clock)
    assert Reconciler(settings).run_pass(sessions, now=clock.now).num_errors == 0
    overview = client.get("/v1/deployments/tiny/overview").json()
    assert overview["pool_plan"]["load"]["prefill_sized_by"] == sized_by
    assert f"prefill by {sized_by}" in render_pools(overview)[1]


def test_observe_records_the_plan_and_changes_nothing(client, clock, sessions, settings):
    register(client, mode="observe")
    windows(client, clock, 6, itl=0.09)
    off_tick(clock)
    Reconciler(settings).run_pass(sessions, now=clock.now)
    [action] = size_actions(sessions)
    assert action.status == "planned" and action.version is None
    with sessions() as session:
        decode = deployments.get_pool(session, deployments.get(session, "tiny"), "decode")
        assert POOL_SIZE.versions.latest(session, decode).value is None


def test_healthy_windows_keep_the_pools_and_no_slo_plans_nothing(client, clock, sessions, settings):
    register(client)
    windows(client, clock, 6, itl=0.02)
    off_tick(clock)
    result = Reconciler(settings).run_pass(sessions, now=clock.now)
    assert size_actions(sessions) == [] and result.pool_plans["tiny"].plan.changes == ()
    client.put("/v1/deployments/tiny/policy", json=POLICY | {"slo": None}, headers=operator())
    assert Reconciler(settings).run_pass(sessions, now=clock.now).pool_plans == {}


def test_on_a_predictive_step_decode_itl_near_its_target_moves_the_threshold_down(client, clock, sessions,
                                                                                  settings):
    register(client)
    windows(client, clock, 6, itl=0.045)  # at 90% of its target: short prompts back to the prefill pool
    while not is_predictive_tick(clock.now, WINDOW, POLICY["pool_predictive_interval_seconds"]):
        windows(client, clock, 1, itl=0.045)
    Reconciler(settings).run_pass(sessions, now=clock.now)
    [action] = size_actions(sessions, "local_prefill_threshold")
    assert action.predicted == {"tokens_before": 256, "tokens_after": 128} and action.status == "applied"
    assert action.reason.startswith("decode ITL at 0.90 of its target")
    with sessions() as session:
        decode = deployments.get_pool(session, deployments.get(session, "tiny"), "decode")
        assert PREFILL_THRESHOLD.versions.latest(session, decode).value == 128
    # the routers and the agents are told the new threshold in their answers
    answer = client.post("/v1/agents/router-window", content=json.dumps(router_window_body(clock.now - WINDOW,
                                                                                          router="router-1")),
                         headers=agent() | {"Content-Type": "application/json"})
    assert answer.json()["local_prefill_threshold"] == 128
