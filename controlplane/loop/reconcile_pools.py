"""The pool planner's reads and its record: what the routers and the instances measured (`observe`, before it
plans both pools of a PD-disaggregated deployment: controlplane/plan/pool_plan.py) and the plan people read
(`store.pool_plans`, written each pass). Its pool sizes and threshold are written as any knob's
(controlplane/loop/proposals.py). A deployment is planned only with a latency SLO in its policy and both a
prefill and a decode pool, or a unified one (controlplane/solve/pools/unified.py: vLLM servers).
"""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from controlplane.actuate.scale import UNSCHEDULABLE, last_applied
from controlplane.config import Settings
from controlplane.desired import Policy, ReplicaBounds
from controlplane.observed.serving import ROLES
from controlplane.plan.pool_inputs import ObservedPools
from controlplane.plan.pool_plan import PoolPlan
from controlplane.plan.pools import targets_of
from controlplane.solve.pools.decision import DecisionKind, PoolDecision, ThresholdDecision
from controlplane.solve.pools.unified import ROLE as UNIFIED
from controlplane.solve.pools.view import PoolSize, PoolsView
from controlplane.store import actions, deployments, pool_plans, pools, prefill_thresholds, serving
from controlplane.store.knobs import POOL_SIZE, PREFILL_THRESHOLD
from controlplane.store.tables import Action, Deployment, Pool
from controlplane.store.timestamps import seconds
from controlplane.store.window_reads import first_unread_index

DONE = (actions.APPLIED, actions.VERIFIED)
MAX_HISTORY = 50


def _sizes(session: Session, by_role: dict[str, Pool], policy: Policy, settings: Settings,
           now: float) -> dict[str, PoolSize]:
    """Ready: instances reporting, up to moectl's size; starting: the rest of that size but those the platform
    cannot place (a full cluster, actuate/scale.py); draining: instances still reporting past it (leaving). While
    some cannot be placed the pool may not grow: its maximum is what it serves. A pool moectl never sized is what
    reports."""
    out = {}
    for role, pool in by_role.items():
        fresh = pools.fresh_instances(session, pool, settings, now)
        size = POOL_SIZE.versions.latest(session, pool).value
        size = fresh if size is None else size
        holder = last_applied(session, pool)[0]
        unplaced = holder.measured.get(UNSCHEDULABLE, 0) if holder is not None else 0
        bounds = policy.replicas.get(role, ReplicaBounds())
        ready, starting = min(fresh, size), max(0, size - fresh - unplaced)
        out[role] = PoolSize(ready, starting, max(0, fresh - size), num_unschedulable=unplaced,
                             gpus_per_replica=pool.ep_size, min_replicas=bounds.min,
                             max_replicas=min(bounds.max, max(ready + starting, bounds.min)) if unplaced
                             else bounds.max)
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


def observe(session: Session, deployment: Deployment, policy: Policy, settings: Settings, *,
            now: float) -> ObservedPools | None:
    """What the pool planner reads of the deployment; None when the policy has no SLO or the deployment has neither
    both PD pools nor a unified one (then it is not planned)."""
    if policy.slo is None:
        return None
    by_role = {role: deployments.get_pool(session, deployment, role) for role in ROLES}
    unified = deployments.get_pool(session, deployment, UNIFIED)
    if any(p is None for p in by_role.values()):
        if unified is None:
            return None
        by_role = {UNIFIED: unified}  # one pool whose replicas prefill and decode (vLLM servers): no threshold
    current_index = first_unread_index(now, settings.window_seconds)
    windows = serving.pool_windows(session, deployment, list(by_role.values()), before_index=current_index,
                                   limit=settings.history_windows, grid_seconds=settings.window_seconds)
    threshold = None
    if "decode" in by_role:
        threshold = prefill_thresholds.in_force(session, by_role["decode"], policy)
        if threshold is None:  # what the routers said they route by
            threshold = serving.reported_threshold(session, deployment)
    view = PoolsView(now=now, windows=windows, pools=_sizes(session, by_role, policy, settings, now),
                     targets=targets_of(policy.slo), local_prefill_threshold=threshold or 0,
                     gpu_budget=policy.gpu_budget, history=_size_history(session, by_role),
                     threshold_history=_threshold_history(session, by_role["decode"]) if "decode" in by_role else ())
    return ObservedPools(deployment.name, view, is_threshold_known=threshold is not None)


def record(session: Session, deployment: Deployment, outcome: PoolPlan, *, now: float) -> None:
    pool_plans.put(session, deployment, at=now, plan=outcome.summary)
