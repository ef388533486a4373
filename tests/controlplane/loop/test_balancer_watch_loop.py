"""The watchdog through the real controller (API, store, loop) on a simulated fleet: a vLLM-like balancer whose
rearranges keep arriving is quiet; once they stop while the fleet serves, the loop records one finding and the
controller's gauge says so. An SGLang group whose dumps stop while it serves (its windows then carry no tokens, only
its serving counters) and a bundled group that stops switching when told are found the same way."""

from __future__ import annotations

from prometheus_client import CollectorRegistry
from support.auth import API_TOKEN
from support.fleet import run_windows, start_fleet

from controlplane.loop.findings import BALANCER_STALLED
from controlplane.loop.reconcile import Reconciler
from controlplane.loop.telemetry import ControllerMetrics
from controlplane.plan.balancer_watch import MAX_SILENT_INTERVALS

QUIET = {"mode": "auto", "imbalance_threshold": 100, "all2all_share_target": None}  # no knob moves


def start_vllm_fleet(client):
    """A fleet registered as vLLM: its balancer rearranges every other window (rank 0 counts them)."""
    fleet = start_fleet(client, QUIET)
    client.put(f"/v1/deployments/{fleet[0].deployment}/engine", json={"engine": "vllm"},
               headers={"Authorization": f"Bearer {API_TOKEN}"}).raise_for_status()
    fleet[0].balancer_every_windows = 2
    return fleet


def start_sglang_fleet(client):
    """A fleet registered as SGLang: its sidecar reads a dump every window, and the load comes only in them."""
    fleet = start_fleet(client, QUIET)
    client.put(f"/v1/deployments/{fleet[0].deployment}/engine", json={"engine": "sglang"},
               headers={"Authorization": f"Bearer {API_TOKEN}"}).raise_for_status()
    fleet[0].balancer_every_windows, fleet[0].is_load_in_acts = 1, True
    return fleet


def stalled(overview: dict) -> list[dict]:
    return [a for a in overview["last_actions"] if a["kind"] == BALANCER_STALLED]


def gauge(settings, sessions, clock, deployment: str, engine: str) -> float | None:
    metrics = ControllerMetrics(CollectorRegistry())
    result = Reconciler(settings).run_pass(sessions, now=clock.now + settings.window_seconds)
    metrics.observe_pass(result.plans, result.num_errors, result.seconds, balancers=result.balancers)
    return metrics.registry.get_sample_value("moectl_controller_balancer_stalled",
                                             {"deployment": deployment, "role": "decode", "engine": engine})


def test_rearranges_that_stop_while_serving_are_found_once_and_not_while_they_arrive(client, sessions, settings,
                                                                                    clock):
    fleet = start_vllm_fleet(client)
    arriving = run_windows(client, sessions, settings, clock, fleet, 10)
    assert not stalled(arriving[-1])

    fleet[0].is_balancer_stopped = True
    # k intervals of 2 windows and one more: stalled; one window short of it, not yet
    before = run_windows(client, sessions, settings, clock, fleet, 2 * MAX_SILENT_INTERVALS - 1)
    assert not stalled(before[-1])
    after = run_windows(client, sessions, settings, clock, fleet, 3)
    [found] = stalled(after[-1])
    assert found["status"] == "recorded" and "has stopped while the engine serves" in found["reason"]
    assert found["inputs"]["interval_seconds"] == 2 * settings.window_seconds
    later = run_windows(client, sessions, settings, clock, fleet, 3)
    assert len(stalled(later[-1])) == 1  # at most once an hour


def test_a_vllm_pool_whose_rearranges_stop_raises_the_gauge(client, sessions, settings, clock):
    fleet = start_vllm_fleet(client)
    run_windows(client, sessions, settings, clock, fleet, 8)
    assert gauge(settings, sessions, clock, fleet[0].deployment, "vllm") == 0
    fleet[0].is_balancer_stopped = True
    run_windows(client, sessions, settings, clock, fleet, 2 * MAX_SILENT_INTERVALS + 2)
    assert gauge(settings, sessions, clock, fleet[0].deployment, "vllm") == 1


def test_sglang_dumps_that_stop_while_serving_are_found_and_raise_the_gauge(client, sessions, settings, clock):
    fleet = start_sglang_fleet(client)
    arriving = run_windows(client, sessions, settings, clock, fleet, 6)
    assert not stalled(arriving[-1])
    assert gauge(settings, sessions, clock, fleet[0].deployment, "sglang") == 0

    fleet[0].is_balancer_stopped = True
    # k windows without a dump (one interval each): not yet; one more: stalled
    before = run_windows(client, sessions, settings, clock, fleet, MAX_SILENT_INTERVALS)
    assert not stalled(before[-1])
    after = run_windows(client, sessions, settings, clock, fleet, 2)
    [found] = stalled(after[-1])
    assert "(dumps)" in found["reason"] and "has stopped while the engine serves" in found["reason"]
    assert found["inputs"]["watched"] == "dumps" and found["inputs"]["interval_seconds"] == settings.window_seconds
    assert gauge(settings, sessions, clock, fleet[0].deployment, "sglang") == 1


def test_a_bundled_group_that_does_not_switch_when_told_is_found(client, sessions, settings, clock):
    fleet = start_fleet(client, {"mode": "auto", "cooldown_seconds": 0})
    fleet[0].is_switch_stuck = True
    overviews = run_windows(client, sessions, settings, clock, fleet, 8)
    assert overviews[-1]["pools"][0]["placement_version"] >= 1 and fleet[0].placement_version == 0
    [found] = stalled(overviews[-1])
    assert "does not switch when told" in found["reason"]
    assert gauge(settings, sessions, clock, fleet[0].deployment, "bundled") == 1


def test_a_bundled_group_that_switches_is_quiet(client, sessions, settings, clock):
    fleet = start_fleet(client, {"mode": "auto", "cooldown_seconds": 0})
    overviews = run_windows(client, sessions, settings, clock, fleet, 8)
    assert fleet[0].placement_version >= 1 and not stalled(overviews[-1])
    assert gauge(settings, sessions, clock, fleet[0].deployment, "bundled") == 0
