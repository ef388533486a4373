"""The controller's own metrics, on a registry the entry point creates and passes in."""

from __future__ import annotations

from collections.abc import Sequence

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from controlplane.desired import Plan
from controlplane.diagnose import Cause, MtpDiagnosis
from controlplane.routing_reach import RoutingReach

KNOBS = ("placement", "routing")


class ControllerMetrics:
    def __init__(self, registry: CollectorRegistry):
        self.registry = registry
        self.snapshots = Counter("moectl_controller_snapshots_total", "Snapshots received, by HTTP status",
                                 ["status"], registry=registry)
        self.decisions = Counter("moectl_controller_decisions_total", "Loop decisions per pool",
                                 ["deployment", "role", "decision"], registry=registry)
        self.imbalance = Gauge("moectl_controller_imbalance_ratio",
                               "Measured max/mean GPU expert load of the last window (mean over MoE layers)",
                               ["deployment", "role"], registry=registry)
        self.pass_seconds = Histogram("moectl_controller_reconcile_seconds", "Duration of one reconcile pass",
                                      registry=registry)
        self.routing_limit_violation = Gauge(
            "moectl_controller_routing_limit_violation",
            "1 while the pool's group limit (topk_group) is configured but its tokens reach more groups",
            ["deployment", "role"], registry=registry)
        self.routing_over_limit = Gauge(
            "moectl_controller_routing_over_limit_ratio",
            "Share of the last measured window's tokens whose top-k reached more groups than the limit in force",
            ["deployment", "role"], registry=registry)
        self.pass_errors = Counter("moectl_controller_reconcile_errors_total",
                                   "Failed reconciles: of a pool, or of a whole pass (the database gone)",
                                   registry=registry)
        self.parked = Gauge("moectl_controller_knob_parked",
                            "1 while a knob is parked for the pool: its last change was reverted and the loop leaves "
                            "it until the model, the policy or the load changes", ["deployment", "role", "knob"],
                            registry=registry)
        self.mtp_diagnosis = Gauge("moectl_controller_mtp_diagnosis",
                                   "1 for the cause the controller found for MTP acceptance under its floor "
                                   "(skew, routing, regression, not_load_related); all 0 while it is not under it",
                                   ["deployment", "role", "cause"], registry=registry)
        self.leader = Gauge("moectl_controller_leader", "1 while this replica leads: it reconciles and writes",
                            registry=registry)

    def observe_pass(self, plans: list[Plan], num_errors: int, seconds: float, *, is_leading: bool = True,
                     reaches: Sequence[RoutingReach] = ()) -> None:
        self.leader.set(1 if is_leading else 0)
        self.pass_seconds.observe(seconds)
        self.pass_errors.inc(num_errors)
        for plan in plans:
            self.decisions.labels(plan.deployment, plan.role, plan.decision.value).inc()
            measured = plan.inputs.get("measured_imbalance")
            if measured:
                self.imbalance.labels(plan.deployment, plan.role).set(measured[-1])
        if not is_leading:  # the leader judges the pools now; a verdict kept here would go stale and keep alerting
            for gauge in (self.routing_limit_violation, self.routing_over_limit, self.parked, self.mtp_diagnosis):
                gauge.clear()
        for reach in reaches:
            self.routing_limit_violation.labels(reach.deployment, reach.role).set(int(reach.is_violated))
            if reach.last is not None:
                self.routing_over_limit.labels(reach.deployment, reach.role).set(reach.last.over_limit_share)

    def observe_pools(self, pools: list[tuple[str, str, tuple[str, ...], MtpDiagnosis | None]]) -> None:
        """pools: (deployment, role, its parked knobs, its MTP diagnosis) after a pass."""
        for deployment, role, parked, mtp in pools:
            for knob in KNOBS:
                self.parked.labels(deployment, role, knob).set(int(knob in parked))
            found = mtp.cause if mtp is not None else None
            for cause in Cause:
                self.mtp_diagnosis.labels(deployment, role, cause.value).set(int(found == cause))
