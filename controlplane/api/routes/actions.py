"""Actions: the audit trail, manual rebalance (with dry run), and approval of waiting plans."""

from __future__ import annotations

from fastapi import APIRouter, HTTPException, Query

from controlplane.api import overview
from controlplane.api.actuation import FOR_THE_LEADER
from controlplane.api.deps import (
    ActuationDep,
    DeploymentName,
    NowDep,
    OperatorDep,
    RowId,
    SessionDep,
    SettingsDep,
    ViewerDep,
)
from controlplane.api.routes.deployments import get_or_404
from controlplane.api.schemas import ActionOut, RebalanceIn, RebalanceOut
from controlplane.desired import Decision, KnobKind, Mode
from controlplane.store import actions, deployments, policies, requests
from controlplane.store.tables import Action, Pool

router = APIRouter(tags=["actions"])


@router.get("/v1/deployments/{name}/actions", response_model=list[ActionOut])
def list_actions(name: DeploymentName, session: SessionDep, _: ViewerDep,
                 limit: int = Query(50, ge=1, le=1000)) -> list[ActionOut]:
    deployment = get_or_404(session, name)
    role_of = {p.id: p.role for p in deployments.pools_of(session, deployment)}
    return [overview.action_out(a, role_of) for a in actions.recent(session, deployment, limit=limit)]


@router.post("/v1/deployments/{name}/rebalance", response_model=list[RebalanceOut])
def rebalance(name: DeploymentName, body: RebalanceIn, session: SessionDep, settings: SettingsDep, now: NowDep,
              actuation: ActuationDep, caller: OperatorDep) -> list[RebalanceOut]:
    """Plans a placement change now, skipping the trigger thresholds but not the safety rails.
    With dry_run the plan is returned and nothing is recorded. Otherwise a request is recorded on each
    pool and reconciled at once. The policy's mode decides whether the plan is recorded (observe), waits
    for approval (approve) or is applied (auto). An action already in flight is joined, not doubled."""
    out = []
    with session.begin():
        deployment = get_or_404(session, name)
        _, policy = policies.active(session, deployment)
        if policy.mode == Mode.off and not body.dry_run:
            raise HTTPException(409, f"deployment {name!r} has policy mode 'off'; set another mode or use dry_run")
        targets = [p for p in deployments.pools_of(session, deployment) if body.role in (None, p.role)]
        if not targets:
            raise HTTPException(404, f"deployment {name!r} has no pool {body.role!r} reporting yet")
        role_of = {p.id: p.role for p in targets}
        for pool in targets:
            if body.dry_run:  # records no request: it plans as one would
                result = actuation.preview(session, deployment, pool, now=now)
            else:
                requests.record(session, pool, requests.Ask(KnobKind.placement, "manual", caller.name), now=now)
                result = actuation.reconcile(session, deployment, pool, now=now)
            if result is None:
                out.append(RebalanceOut(role=pool.role, decision=Decision.hold.value, reason=FOR_THE_LEADER,
                                        predicted=None, action=None))
                continue
            plan, action = result.plan, result.action
            predicted = action.predicted if action else plan.change and plan.change.predicted()
            reason = plan.reason if action is None or result.is_new else f"{result.outcome}: {plan.reason}"
            out.append(RebalanceOut(role=pool.role, decision=plan.decision.value, reason=reason,
                                    predicted=predicted, action=action and overview.action_out(action, role_of)))
    return out


def _claim(session, action_id: int, now: float) -> tuple[Action, Pool]:
    """The waiting action, claimed by this request: 404 if none, 409 if someone decided it first. The pool
    is locked first, as every writer of the pool does (`deployments.lock_pool`), then the status is
    compare-and-set, so of people deciding at once exactly one wins, on SQLite as on PostgreSQL."""
    action = actions.get(session, action_id)
    if action is None:
        raise HTTPException(404, f"action {action_id} not found")
    pool = session.get(Pool, action.pool_id) if action.pool_id is not None else None
    if pool is not None:
        deployments.lock_pool(session, pool)
    if pool is None or not actions.claim_waiting(session, action, now=now):
        raise HTTPException(409, f"action {action_id} is {action.status}, not awaiting approval")
    return action, pool


@router.post("/v1/actions/{action_id}/approve", response_model=ActionOut)
def approve(action_id: RowId, session: SessionDep, now: NowDep, actuation: ActuationDep,
            caller: OperatorDep) -> ActionOut:
    with session.begin():
        action, pool = _claim(session, action_id, now)
        actuation.approve(session, pool, action, approved_by=caller.name, now=now)
        return overview.action_out(action, {pool.id: pool.role})


@router.post("/v1/actions/{action_id}/reject", response_model=ActionOut)
def reject(action_id: RowId, session: SessionDep, now: NowDep, actuation: ActuationDep,
           caller: OperatorDep) -> ActionOut:
    with session.begin():
        action, pool = _claim(session, action_id, now)
        actuation.reject(action, rejected_by=caller.name, now=now)
        return overview.action_out(action, {pool.id: pool.role})
