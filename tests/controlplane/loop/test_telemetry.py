"""The controller's own metrics for alerting: a parked knob and the MTP diagnosis, per pool, after each pass."""

from __future__ import annotations

from prometheus_client import CollectorRegistry
from support.fleet import CPU, run_windows, start_fleet

from controlplane.desired import Decision, Plan
from controlplane.loop.reconcile import Reconciler
from controlplane.loop.telemetry import ControllerMetrics

POLICY = {"mode": "auto", "imbalance_threshold": 100, "cooldown_seconds": 30, "all2all_share_target": 0.3}


def observe(sessions, settings, clock) -> CollectorRegistry:
    metrics = ControllerMetrics(CollectorRegistry())
    result = Reconciler(settings).run_pass(sessions, now=clock.now)
    metrics.observe_pools([(r.plan.deployment, r.plan.role, r.parked, r.mtp) for r in result.pools])
    return metrics.registry


def test_a_parked_knob_and_a_not_load_related_diagnosis_are_exported(client, sessions, settings, clock):
    # on CPU gloo: routing parks after one reverted try; MTP acceptance (~0.72) stays under a floor of
    # 0.95 with the load balanced enough, the model's own limit back in force and the change rolled back
    fleet = start_fleet(client, POLICY | {"mtp_acceptance_floor": 0.95}, **CPU)
    run_windows(client, sessions, settings, clock, fleet, 14)  # a minute of load, a try, its verdict, 2 windows
    registry = observe(sessions, settings, clock)
    labels = {"deployment": "sim-0", "role": "decode"}
    assert registry.get_sample_value("moectl_controller_knob_parked", labels | {"knob": "routing"}) == 1
    assert registry.get_sample_value("moectl_controller_knob_parked", labels | {"knob": "placement"}) == 0
    for cause, value in {"not_load_related": 1, "skew": 0, "routing": 0, "regression": 0}.items():
        assert registry.get_sample_value("moectl_controller_mtp_diagnosis", labels | {"cause": cause}) == value


def test_the_imbalance_and_its_floor_are_exported_from_the_plans_inputs():
    metrics = ControllerMetrics(CollectorRegistry())
    inputs = {"measured_imbalance": [2.61, 2.58], "imbalance_floor": 2.4}
    metrics.observe_pass([Plan("d", "decode", Decision.keep, "best plan gains 0.001", inputs),
                          Plan("d", "prefill", Decision.hold, "only 1/8 agents are fresh", {})], 0, 0.1)
    decode, prefill = {"deployment": "d", "role": "decode"}, {"deployment": "d", "role": "prefill"}
    assert metrics.registry.get_sample_value("moectl_controller_imbalance_ratio", decode) == 2.58
    assert metrics.registry.get_sample_value("moectl_controller_imbalance_floor_ratio", decode) == 2.4
    assert metrics.registry.get_sample_value("moectl_controller_imbalance_floor_ratio", prefill) is None
