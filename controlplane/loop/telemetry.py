"""The controller's own metrics, on a registry the entry point creates and passes in."""

from __future__ import annotations

from collections.abc import Sequence

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from controlplane.desired import KnobKind, Plan
from controlplane.plan.balancer_watch import BalancerWatch
from controlplane.plan.diagnose import Cause, MtpDiagnosis
from controlplane.plan.routing_reach import RoutingReach

PARKABLE = (KnobKind.placement, KnobKind.routing, KnobKind.expert_capacity)  # the knobs a verdict parks


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
        self.imbalance_floor = Gauge("moectl_controller_imbalance_floor_ratio",
                                     "The imbalance no placement of the pool's slots gets under on the last window's "
                                     "expert load: where the measured one sits at it, the pool's shape is the limit",
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
        self.balancer_stalled = Gauge(
            "moectl_controller_balancer_stalled",
            "1 while the engine's own balancer has stopped acting while the engine serves: vLLM's rearranges stopped "
            "for k of their intervals, or a bundled group does not switch to the placement it was told",
            ["deployment", "role", "engine"], registry=registry)
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
        # the pool planner (controlplane/loop/reconcile_pools.py), per deployment with a latency SLO
        pool = ["deployment", "role"]
        self.pool_replicas = Gauge("moectl_controller_pool_replicas", "Instances per pool: ready, starting "
                                   "(asked for, not serving yet), draining (leaving), unschedulable (asked for, "
                                   "the cluster cannot place them)", [*pool, "state"],
                                   registry=registry)
        self.pool_target = Gauge("moectl_controller_pool_target_replicas", "Instances the pool planner wants",
                                 pool, registry=registry)
        self.pool_bounds = Gauge("moectl_controller_pool_replica_bounds", "The policy's replica bounds",
                                 [*pool, "bound"], registry=registry)
        self.pool_decisions = Counter("moectl_controller_pool_decisions_total", "Pool planner decisions per pool "
                                      "and pass, by kind (predictive, reactive, consolidate, budget, hold, keep)",
                                      [*pool, "kind"], registry=registry)
        self.pool_predicted = Gauge("moectl_controller_pool_predicted_seconds", "The binding SLO's percentile "
                                    "the planner predicts at its target size", [*pool, "slo"], registry=registry)
        self.slo_target = Gauge("moectl_controller_slo_target_seconds", "The policy's latency targets",
                                ["deployment", "slo"], registry=registry)
        self.slo_measured = Gauge("moectl_controller_slo_measured_seconds", "The latency targets' percentiles "
                                  "measured by the routers over the last window", ["deployment", "slo"],
                                  registry=registry)
        self.request_rate = Gauge("moectl_controller_request_rate", "Requests per second: measured (last window), "
                                  "planned (what the pools are sized for), forecast (last predictive step)",
                                  ["deployment", "source"], registry=registry)
        self.threshold = Gauge("moectl_controller_local_prefill_threshold_tokens", "The PD-aware threshold in force",
                               ["deployment"], registry=registry)

    def observe_pool_plan(self, deployment: str, plan: dict) -> None:
        """plan: a deployment's pool plan as people read it (controlplane/loop/reconcile_pools.py `summary`)."""
        for role, pool in plan["pools"].items():
            for state in ("ready", "starting", "draining", "unschedulable"):
                self.pool_replicas.labels(deployment, role, state).set(pool.get(state, 0))
            for bound in ("min", "max"):
                self.pool_bounds.labels(deployment, role, bound).set(pool[bound])
            decision = pool["decision"]
            self.pool_target.labels(deployment, role).set(decision["target"])
            self.pool_decisions.labels(deployment, role, decision["kind"]).inc()
            predicted = decision["predicted"]
            if predicted and predicted.get("seconds") is not None:
                self.pool_predicted.labels(deployment, role, predicted["slo"]).set(predicted["seconds"])
        for name, seconds in plan["targets"].items():
            self.slo_target.labels(deployment, name).set(seconds)
            measured = plan["measured"].get(name)
            if measured is not None:
                self.slo_measured.labels(deployment, name).set(measured)
        for source, load in (("measured", plan["measured"]), ("planned", plan["load"]),
                             ("forecast", plan["forecast"])):
            if load and load.get("request_rate") is not None:
                self.request_rate.labels(deployment, source).set(load["request_rate"])
        if plan["threshold"]["tokens"] is not None:
            self.threshold.labels(deployment).set(plan["threshold"]["tokens"])

    def observe_pass(self, plans: list[Plan], num_errors: int, seconds: float, *, is_leading: bool = True,
                     pool_plans: dict | None = None, reaches: Sequence[RoutingReach] = (),
                     balancers: Sequence[BalancerWatch] = ()) -> None:
        """pool_plans: deployment -> the pass's pool plan (an object with `summary`)."""
        self.leader.set(1 if is_leading else 0)
        self.pass_seconds.observe(seconds)
        self.pass_errors.inc(num_errors)
        for plan in plans:
            self.decisions.labels(plan.deployment, plan.role, plan.decision.value).inc()
            measured = plan.inputs.get("measured_imbalance")
            if measured:
                self.imbalance.labels(plan.deployment, plan.role).set(measured[-1])
            if plan.inputs.get("imbalance_floor") is not None:
                self.imbalance_floor.labels(plan.deployment, plan.role).set(plan.inputs["imbalance_floor"])
        for deployment, outcome in (pool_plans or {}).items():
            self.observe_pool_plan(deployment, outcome.summary)
        if not is_leading:  # the leader judges the pools now; a verdict kept here would go stale and keep alerting
            for gauge in (self.routing_limit_violation, self.routing_over_limit, self.parked, self.mtp_diagnosis,
                          self.balancer_stalled):
                gauge.clear()
        for reach in reaches:
            self.routing_limit_violation.labels(reach.deployment, reach.role).set(int(reach.is_violated))
            if reach.last is not None:
                self.routing_over_limit.labels(reach.deployment, reach.role).set(reach.last.over_limit_share)
        for watch in balancers:
            if watch.watched is not None:
                self.balancer_stalled.labels(watch.deployment, watch.role, watch.engine).set(int(watch.is_stalled))

    def observe_pools(self, pools: list[tuple[str, str, tuple[str, ...], MtpDiagnosis | None]]) -> None:
        """pools: (deployment, role, its parked knobs, its MTP diagnosis) after a pass."""
        for deployment, role, parked, mtp in pools:
            for knob in PARKABLE:
                self.parked.labels(deployment, role, knob).set(int(knob in parked))
            found = mtp.cause if mtp is not None else None
            for cause in Cause:
                self.mtp_diagnosis.labels(deployment, role, cause.value).set(int(found == cause))
