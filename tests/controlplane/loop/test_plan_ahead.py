"""Planning before the pool's lock: an agent's post is not held up while the planner solves, and the plan the
loop acts on is still the one for what is stored when it holds the lock."""

from __future__ import annotations

import dataclasses
import logging

import numpy as np
from support.auth import AGENT_TOKEN, API_TOKEN
from support.fleet import run_windows, start_fleet

from agents.sim.fleet_client import FleetClient
from controlplane.loop.compute import in_process
from controlplane.loop.plan_ahead import PlannedAhead, is_same
from controlplane.loop.reconcile import Reconciler
from controlplane.plan.decisions import decide


@dataclasses.dataclass(frozen=True)
class Shape:
    name: str
    table: np.ndarray
    parts: tuple = ()


def test_values_are_the_same_by_value_arrays_included():
    a = Shape("a", np.arange(6).reshape(2, 3), (1.5, {"k": np.zeros(2)}))
    assert is_same(a, Shape("a", np.arange(6).reshape(2, 3), (1.5, {"k": np.zeros(2)})))
    assert not is_same(a, Shape("a", np.arange(6).reshape(3, 2), (1.5, {"k": np.zeros(2)})))  # shape
    assert not is_same(a, Shape("a", np.arange(6.0).reshape(2, 3), (1.5, {"k": np.zeros(2)})))  # dtype
    assert not is_same(a, Shape("a", np.arange(6).reshape(2, 3), (1.5, {"k": np.ones(2)})))  # deep inside
    assert not is_same(a, Shape("a", np.arange(6).reshape(2, 3), (1.5, {"j": np.zeros(2)})))
    assert not is_same(float("nan"), float("nan"))  # never equal: planned again, never reused wrongly


def test_a_call_with_equal_inputs_is_answered_from_memory_and_any_difference_computes_again():
    calls = []

    def solve(table: np.ndarray, *, scale: int) -> int:
        calls.append(scale)
        return int(table.sum()) * scale

    planned = PlannedAhead(in_process)
    assert planned(solve, np.ones((2, 2)), scale=2) == 8
    assert planned(solve, np.ones((2, 2)), scale=2) == 8  # equal, not identical: from memory
    assert planned(solve, np.ones((2, 2)), scale=3) == 12
    assert planned(solve, np.full((2, 2), 2.0), scale=2) == 16
    assert calls == [2, 3, 2] and planned.num_reused == 1


class CountingCompute:
    """Runs the planner in-process, counting its runs; `during` runs while it plans (once)."""

    def __init__(self, during=None):
        self.num_plans, self.during, self.states = 0, during, []

    def __call__(self, fn, *args, **kwargs):
        if fn is decide:
            self.num_plans += 1
            self.states.append(args[1].state)
            during, self.during = self.during, None
            if during is not None:
                during()
        return fn(*args, **kwargs)


def test_an_agents_post_goes_through_while_the_loop_plans_and_the_pool_is_planned_once(client, sessions, settings,
                                                                                          clock):
    fleet = start_fleet(client, {"mode": "auto", "cooldown_seconds": 0})
    run_windows(client, sessions, settings, clock, fleet, 3, reconcile=False)
    answers = []

    def post_next_window():  # the window now filling: nothing the plan reads changes
        snapshot = fleet[0].window(clock.now, settings.window_seconds)[0]
        answers.append(client.post("/v1/agents/snapshot", headers={"Authorization": f"Bearer {AGENT_TOKEN}"},
                                   json=snapshot.model_dump(mode="json")).status_code)

    compute = CountingCompute(during=post_next_window)
    result = Reconciler(settings, compute=compute).run_pass(sessions, now=clock.now + settings.window_seconds / 2 + 0.1)
    # SQLite: planned before the lock (its one write lock), so the post was not held behind the planner
    assert answers == [200]
    assert [p.decision.value for p in result.plans] == ["rebalance"] and result.num_errors == 0
    assert compute.num_plans == 1  # the plan under the lock was the one made before it


def test_what_changed_before_the_lock_is_planned_again_under_it(client, sessions, settings, clock):
    fleet = start_fleet(client, {"mode": "auto", "cooldown_seconds": 0})
    run_windows(client, sessions, settings, clock, fleet, 3, reconcile=False)
    late_start = clock.now - settings.window_seconds  # the newest complete window

    def late_post():  # another instance's ranks report the newest complete window late
        other = start_fleet(client, {"mode": "auto", "cooldown_seconds": 0})[0]
        other.instance = "late"
        FleetClient(client, api_token=API_TOKEN, agent_token=AGENT_TOKEN).post_window(
            [other], late_start, settings.window_seconds)

    compute = CountingCompute(during=late_post)
    Reconciler(settings, compute=compute).run_pass(sessions, now=clock.now + settings.window_seconds / 2 + 0.1)
    if settings.database_url.startswith("sqlite"):  # planned ahead, then again under the lock on what is stored
        assert compute.num_plans == 2
        before, after = (state.windows[-1].num_reports for state in compute.states)
        assert after == before + fleet[0].ep_size
    else:  # the pool's lock is a row lock: planned once, under it
        assert compute.num_plans == 1


def test_each_decision_is_logged_once_a_pass(client, sessions, settings, clock, caplog):
    """SQLite plans ahead with a dry run before every pass; only the pass that acts says what it decided."""
    fleet = start_fleet(client, {"mode": "observe"})
    run_windows(client, sessions, settings, clock, fleet, 3, reconcile=False)
    with caplog.at_level(logging.INFO, logger="moectl.reconcile"):
        result = Reconciler(settings).run_pass(sessions, now=clock.now + settings.window_seconds / 2 + 0.1)
    [plan] = result.plans
    said = [r.getMessage() for r in caplog.records if r.name == "moectl.reconcile"]
    assert said.count(f"{plan.deployment}/{plan.role}: {plan.decision.value} ({plan.reason})") == 1, said
