"""The pool planner's part of a pass: read what the routers and the instances measured, plan both pools of
a PD-disaggregated deployment (controlplane/plan/pools.py), and write what it decided through the one
writer (actuate.change), as any knob: a pool-size action per pool whose size it changes, and a threshold
action for the PD-aware local-prefill threshold, each with the decision's reason and predicted effect,
under the policy's mode and the one-in-flight rule. A deployment is planned only with a latency SLO in its
policy and both a prefill and a decode pool; the plan people read (`store.pool_plans`) is written each pass.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.orm import Session

from controlplane.actuate import change
from controlplane.actuate.in_flight import in_flight
from controlplane.actuate.pool_size import POOL_SIZE
from controlplane.actuate.prefill_threshold import PREFILL_THRESHOLD
from controlplane.actuate.scale import standing_down
from controlplane.config import Settings
from controlplane.desired import Policy, ReplicaBounds
from controlplane.observed.serving import ROLES, PoolWindow
from controlplane.plan.pools import planner_for, targets_of
from controlplane.solve.pools.decision import DecisionKind, PoolDecision, PoolPlan, ThresholdDecision
from controlplane.solve.pools.view import PoolSize, PoolsView
from controlplane.store import actions, deployments, pool_plans, pool_sizes, pools, prefill_thresholds, serving
from controlplane.store.tables import Action, Deployment, Pool
from controlplane.store.timestamps import seconds
from controlplane.store.window_reads import first_unread_index

log = logging.getLogger("moectl.pools")
DONE = (actions.APPLIED, actions.VERIFIED)
MAX_HISTORY = 50


@dataclass(frozen=True)
class PoolsOutcome:
    """One deployment's pool plan in a pass; `summary` is what people read (store.pool_plans)."""

    deployment: str
    plan: PoolPlan
    summary: dict


def _sizes(session: Session, by_role: dict[str, Pool], policy: Policy, settings: Settings,
           now: float) -> dict[str, PoolSize]:
    """Ready: instances reporting, up to moectl's size; starting: the rest of that size; draining: instances
    still reporting past it (leaving). A pool moectl never sized is what reports."""
    out = {}
    for role, pool in by_role.items():
        fresh = pools.fresh_instances(session, pool, settings, now)
        size = pool_sizes.latest(session, pool).replicas
        size = fresh if size is None else size
        bounds = policy.replicas.get(role, ReplicaBounds())
        out[role] = PoolSize(min(fresh, size), max(0, size - fresh), max(0, fresh - size),
                             gpus_per_replica=pool.ep_size, min_replicas=bounds.min, max_replicas=bounds.max)
    return out


def _history(session: Session, by_role: dict[str, Pool], kind: str) -> list[Action]:
    """The applied changes of `kind` to these pools, oldest first."""
    role_of = {pool.id: role for role, pool in by_role.items()}
    return list(reversed(list(session.scalars(
        select(Action).where(Action.pool_id.in_(role_of), Action.kind == kind, Action.status.in_(DONE))
        .order_by(Action.id.desc()).limit(MAX_HISTORY)))))


def _size_history(session: Session, by_role: dict[str, Pool]) -> tuple[PoolDecision, ...]:
    role_of = {pool.id: role for role, pool in by_role.items()}
    out = []
    for a in _history(session, by_role, POOL_SIZE.kind):
        before, after = a.predicted.get("replicas_before"), a.predicted.get("replicas_after")
        if before is None or after is None:
            continue  # a first size set by a person: no direction to hold against
        kind = a.inputs.get("kind", DecisionKind.predictive.value)
        out.append(PoolDecision(seconds(a.created_at), role_of[a.pool_id], before, after,
                                DecisionKind(kind) if kind in DecisionKind.__members__ else DecisionKind.predictive,
                                a.reason, request_rate=a.inputs.get("request_rate")))
    return tuple(out)


def _threshold_history(session: Session, decode: Pool) -> tuple[ThresholdDecision, ...]:
    return tuple(ThresholdDecision(seconds(a.created_at), a.predicted["tokens_before"], a.predicted["tokens_after"],
                                   a.reason, {}) for a in _history(session, {"decode": decode}, PREFILL_THRESHOLD.kind))


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


def _summary(view: PoolsView, plan: PoolPlan, threshold_known: bool) -> dict:
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
                         "min": size.min_replicas, "max": size.max_replicas, "gpus_per_replica": size.gpus_per_replica,
                         "decision": decision(plan.decision(role))} for role, size in view.pools.items()},
        "load": load, "forecast": load | {"at": view.now} if load and load["method"] != "measured" else None,
        "threshold": {"tokens": view.local_prefill_threshold if threshold_known else None,
                      "decision": None if threshold is None or not threshold_known else
                      {"current": threshold.current, "target": threshold.target, "reason": threshold.reason}},
        "measured": _measured(view.latest)})


def plan_deployment(session: Session, deployment: Deployment, policy: Policy, settings: Settings, *,
                    now: float) -> PoolsOutcome | None:
    """Plans both pools; None when the policy has no SLO or the deployment is not PD-disaggregated."""
    by_role = {role: deployments.get_pool(session, deployment, role) for role in ROLES}
    if policy.slo is None or any(p is None for p in by_role.values()):
        return None
    current_index = first_unread_index(now, settings.window_seconds)
    windows = serving.pool_windows(session, deployment, list(by_role.values()), before_index=current_index,
                                   limit=settings.history_windows, grid_seconds=settings.window_seconds)
    threshold = prefill_thresholds.in_force(session, by_role["decode"], policy)
    if threshold is None:  # what the routers said they route by
        threshold = serving.reported_threshold(session, deployment)
    view = PoolsView(now=now, windows=windows, pools=_sizes(session, by_role, policy, settings, now),
                     targets=targets_of(policy.slo), local_prefill_threshold=threshold or 0,
                     gpu_budget=policy.gpu_budget, history=_size_history(session, by_role),
                     threshold_history=_threshold_history(session, by_role["decode"]))
    plan = planner_for(policy, settings.window_seconds, settings.replica_startup_seconds).plan(view)
    summary = _summary(view, plan, threshold is not None)
    if threshold is None:
        plan = PoolPlan(plan.at, plan.decisions, None, plan.load)
    return PoolsOutcome(deployment.name, plan, summary)


def record(session: Session, deployment: Deployment, outcome: PoolsOutcome, *, now: float) -> None:
    pool_plans.put(session, deployment, at=now, plan=outcome.summary)


def actuate(session: Session, deployment: Deployment, pool: Pool, policy: Policy, outcome: PoolsOutcome,
            settings: Settings, *, now: float) -> Action | None:
    """Writes what the plan decided for `pool` (and, for the decode pool, the threshold); returns the size
    action made, if any. Nothing while an action on the knob is in flight or moectl stands down from it."""
    d = outcome.plan.decision(pool.role)
    made = None
    hold = dict(policy=policy, window_seconds=settings.window_seconds, now=now)
    if d.direction and standing_down(session, pool) is None and \
            in_flight(session, pool, POOL_SIZE.kind, **hold) is None:
        made = change.propose(session, POOL_SIZE, deployment=deployment, pool=pool, value=d.target, policy=policy,
                              reason=f"{d.kind.value}: {d.reason}",
                              inputs={"kind": d.kind.value, "request_rate": finite(d.request_rate),
                                      "measured": outcome.summary["measured"],
                                      "load": outcome.summary["load"],
                                      "pool": {k: v for k, v in outcome.summary["pools"][pool.role].items()
                                               if k != "decision"}},
                              predicted=finite({"replicas_before": d.current, "replicas_after": d.target}
                                               | d.predicted_dict()), trigger="loop", created_by="loop", now=now)
        log.info("%s/%s: %d -> %d replicas (%s: %s)", deployment.name, pool.role, d.current, d.target, d.kind.value,
                 d.reason)
    t = outcome.plan.threshold
    if pool.role == prefill_thresholds.ROLE and t is not None and t.direction and \
            in_flight(session, pool, PREFILL_THRESHOLD.kind, **hold) is None:
        change.propose(session, PREFILL_THRESHOLD, deployment=deployment, pool=pool, value=t.target, policy=policy,
                       reason=t.reason, inputs=finite(dict(t.measured)),
                       predicted={"tokens_before": t.current, "tokens_after": t.target}, trigger="loop",
                       created_by="loop", now=now)
        log.info("%s: local-prefill threshold %d -> %d tokens (%s)", deployment.name, t.current, t.target, t.reason)
    return made
