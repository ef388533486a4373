"""The pool planner's part of a pass, pure: from what was read of a PD-disaggregated deployment before
(`ObservedPools`, loop/reconcile_pools.py `observe`), both pools' sizes and the local-prefill threshold
(plan/pools.py), with the summary people read (store.pool_plans) and the actions' inputs quote."""

from __future__ import annotations

import math
from dataclasses import dataclass

from controlplane.config import Settings
from controlplane.desired import KnobKind, Policy
from controlplane.observed.pool import PoolState
from controlplane.observed.serving import THRESHOLD_ROLE, PoolWindow
from controlplane.plan.knob_plan import Given, KnobPlan, Move
from controlplane.plan.pool_inputs import ObservedPools
from controlplane.plan.pools import planner_for
from controlplane.solve.pools.decision import PoolDecision
from controlplane.solve.pools.planning import PoolDecisions
from controlplane.solve.pools.unified import ROLE as UNIFIED
from controlplane.solve.pools.unified import UnifiedRules, plan_unified
from controlplane.solve.pools.view import PoolsView


@dataclass(frozen=True)
class PoolPlan:
    """One deployment's pool plan in a pass; `summary` is what people read (store.pool_plans)."""

    deployment: str
    plan: PoolDecisions
    summary: dict


def plan_deployment(observed: ObservedPools, policy: Policy, settings: Settings) -> PoolPlan:
    """Plans both pools of the deployment `observed` describes, or its unified pool."""
    view = observed.view
    if set(view.pools) == {UNIFIED}:
        plan = plan_unified(view, UnifiedRules(cooldown_seconds=policy.pool_cooldown_seconds))
    else:
        plan = planner_for(policy, settings.window_seconds, settings.replica_startup_seconds).plan(view)
    summary = _summary(view, plan, observed.is_threshold_known)
    if not observed.is_threshold_known:
        plan = PoolDecisions(plan.at, plan.decisions, None, plan.load)
    return PoolPlan(observed.deployment, plan, summary)


def finite(value):
    """JSON-safe: infinities (a pool predicted unable to carry its load) and NaN become None."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [finite(v) for v in value]
    return value


def _measured(window: PoolWindow | None) -> dict:
    if window is None:
        return {}

    def pct(summary, name):
        return None if summary is None else getattr(summary, name)

    return {"window_end": window.end,
            "request_rate": None if window.num_arrivals is None else window.num_arrivals / window.seconds,
            "local_prefill_share": window.local_prefill_share, "mean_input_tokens": window.mean_input_tokens,
            "mean_output_tokens": window.mean_output_tokens, "ttft_p90": pct(window.ttft, "p90"),
            "ttft_p99": pct(window.ttft, "p99"), "itl_p90": pct(window.itl, "p90"), "itl_p99": pct(window.itl, "p99")}


def _summary(view: PoolsView, plan: PoolDecisions, threshold_known: bool) -> dict:
    def decision(d: PoolDecision) -> dict:
        return {"kind": d.kind.value, "current": d.current, "target": d.target, "reason": d.reason,
                "predicted": d.predicted_dict()}

    load = None
    if plan.load is not None:
        load = {"request_rate": round(plan.load.request_rate, 4), "method": plan.load.method,
                "horizon_seconds": plan.load.horizon_seconds, "is_backtested": plan.load.is_backtested,
                "prompt_tokens": round(plan.load.prompt_tokens, 1), "output_tokens": round(plan.load.output_tokens, 1),
                "remote_share": round(plan.load.remote_share, 4),
                # the routers' length buckets, when counted and the policy uses them, else the mean under the ceiling
                "prefill_sized_by": "mean prompt" if plan.load.remote_mix is None else "prompt-length mix"}
    threshold = plan.threshold
    return finite({
        "at": view.now, "targets": {t.name: t.seconds for t in view.targets}, "gpu_budget": view.gpu_budget,
        "pools": {role: {"ready": size.num_ready, "starting": size.num_starting, "draining": size.num_draining,
                         "unschedulable": size.num_unschedulable,
                         "min": size.min_replicas, "max": size.max_replicas, "gpus_per_replica": size.gpus_per_replica,
                         "decision": decision(plan.decision(role))}
                  for role, size in view.pools.items() if plan.decision_of(role) is not None},  # the sized ones
        "load": load, "forecast": load | {"at": view.now} if load and load["method"] != "measured" else None,
        "threshold": {"tokens": view.local_prefill_threshold if threshold_known else None,
                      "decision": None if threshold is None or not threshold_known else
                      {"current": threshold.current, "target": threshold.target, "reason": threshold.reason}},
        "measured": _measured(view.latest)})


def _decide(given: Given) -> PoolPlan | None:
    pools = given.inputs.pools
    return None if pools is None else plan_deployment(pools, given.policy, given.settings)


def _moves(pool_plan: PoolPlan | None, policy: Policy, state: PoolState, role: str) -> list[Move]:
    """The pool's size, and on the decode pool the local-prefill threshold, where the plan moves them."""
    if pool_plan is None:
        return []
    out = []
    d = pool_plan.plan.decision_of(role)
    if d is not None and d.direction:
        pool = {k: v for k, v in pool_plan.summary["pools"][role].items() if k != "decision"}
        inputs = {"kind": d.kind.value, "request_rate": finite(d.request_rate),
                  "measured": pool_plan.summary["measured"], "load": pool_plan.summary["load"], "pool": pool}
        predicted = finite({"replicas_before": d.current, "replicas_after": d.target} | d.predicted_dict())
        out.append(Move(KnobKind.pool_size, d.target, f"{d.kind.value}: {d.reason}", inputs, predicted,
                        f"{d.current} -> {d.target} replicas ({d.kind.value}: {d.reason})"))
    t = pool_plan.plan.threshold
    if role == THRESHOLD_ROLE and t is not None and t.direction:
        out.append(Move(KnobKind.local_prefill_threshold, t.target, t.reason, finite(dict(t.measured)),
                        {"tokens_before": t.current, "tokens_after": t.target},
                        f"local-prefill threshold {t.current} -> {t.target} tokens ({t.reason})"))
    return out


# both pools' sizes and the local-prefill threshold; a size is verified once the platform runs it (actuate/scale.py)
POOLS_PLAN = KnobPlan(KnobKind.pool_size, _decide, _moves, is_judged=False)
