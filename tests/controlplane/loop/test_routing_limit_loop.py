"""The loop on a simulated fleet whose router stops honouring its group limit: the violation is recorded
once, with the windows that show it, the overview and the controller's gauge say so; before, nothing."""

from __future__ import annotations

from prometheus_client import CollectorRegistry
from support.fleet import run_windows, start_fleet

from agents.sim.fleet import DEFAULT_MODEL
from controlplane.loop.findings import ROUTING_LIMIT_VIOLATION
from controlplane.loop.reconcile import Reconciler
from controlplane.loop.telemetry import ControllerMetrics

MODEL = DEFAULT_MODEL.model_copy(update={"topk_group": 3})  # 8 groups, top-6: at most 3 groups per token
POLICY = {"mode": "auto", "imbalance_threshold": 100, "all2all_share_target": None}  # nothing else moves


def violations(overview: dict) -> list[dict]:
    return [a for a in overview["last_actions"] if a["kind"] == ROUTING_LIMIT_VIOLATION]


def test_a_bypassed_group_limit_is_recorded_once_with_its_evidence(client, sessions, settings, clock):
    fleet = start_fleet(client, POLICY, model=MODEL)
    honoured = run_windows(client, sessions, settings, clock, fleet, 3)
    pool = honoured[-1]["pools"][0]
    assert not violations(honoured[-1]) and not pool["routing_reach"]["is_violated"]
    assert pool["routing_reach"]["topk_group"] == 3 and pool["routing_reach"]["groups_per_token_max"] <= 3
    assert 1 <= pool["history"][-1]["groups_per_token"] <= 3

    fleet[0].is_group_limit_bypassed = True  # the router skips its group limit
    first = int(clock.now // settings.window_seconds)  # the first window posted under it
    bypassed = run_windows(client, sessions, settings, clock, fleet, 2)
    [found] = violations(bypassed[-1])
    assert found["status"] == "recorded" and found["inputs"]["windows"] == [first, first + 1]  # on its 2nd window
    assert found["inputs"]["topk_group"] == 3 and "topk_group=3 not in effect" in found["reason"]
    assert all(w["groups_max"] > 3 and w["over_limit_share"] > 0.1 for w in found["inputs"]["per_window"])

    later = run_windows(client, sessions, settings, clock, fleet, 3)
    assert len(violations(later[-1])) == 1  # at most once an hour
    reach = later[-1]["pools"][0]["routing_reach"]
    assert reach["is_violated"] and reach["groups_per_token_max"] > 3 and "not in effect" in reach["reason"]
    metrics = ControllerMetrics(CollectorRegistry())
    result = Reconciler(settings).run_pass(sessions, now=clock.now + settings.window_seconds)
    metrics.observe_pass(result.plans, result.num_errors, result.seconds, reaches=result.reaches)
    labels = {"deployment": fleet[0].deployment, "role": "decode"}
    assert metrics.registry.get_sample_value("moectl_controller_routing_limit_violation", labels) == 1
    assert metrics.registry.get_sample_value("moectl_controller_routing_over_limit_ratio", labels) > 0.1
    metrics.observe_pass([], 0, 0.01, is_leading=False)  # another replica leads now: its verdict counts
    assert metrics.registry.get_sample_value("moectl_controller_routing_limit_violation", labels) is None
