"""Pool sizes, decided by a person until the pool planner decides them.

Ask for a size (checked against the policy's replica bounds and GPU budget, with a dry run) and read it.
Resume moectl after it stood down from a pool another writer scales."""

from __future__ import annotations

from fastapi import APIRouter, HTTPException
from sqlalchemy.orm import Session

from controlplane.api import overview
from controlplane.api.actuation import FOR_THE_LEADER
from controlplane.api.deps import (
    ActuationDep,
    DeploymentName,
    NowDep,
    OperatorDep,
    PoolRole,
    SessionDep,
    SettingsDep,
    ViewerDep,
)
from controlplane.api.routes.deployments import get_or_404
from controlplane.api.schemas import ActionOut, PoolSizeIn, PoolSizeOut, PoolSizeView
from controlplane.desired import KnobKind
from controlplane.plan.pool_size import check_pool_size
from controlplane.store import deployments, policies, pools, requests
from controlplane.store.knobs import POOL_SIZE
from controlplane.store.tables import Action, Deployment, Pool

router = APIRouter(prefix="/v1/deployments/{name}/pools/{role}/size", tags=["pool sizes"])


def _pool(session: Session, name: str, role: str) -> tuple[Deployment, Pool]:
    deployment = get_or_404(session, name)
    pool = deployments.get_pool(session, deployment, role)
    if pool is None:
        raise HTTPException(404, f"deployment {name!r} has no {role!r} pool reporting")
    return deployment, pool


@router.get("", response_model=PoolSizeView)
def get_pool_size(name: DeploymentName, role: PoolRole, session: SessionDep, actuation: ActuationDep,
                  _: ViewerDep) -> PoolSizeView:
    _, pool = _pool(session, name, role)
    latest, conflict = POOL_SIZE.versions.latest(session, pool), actuation.standing_down(session, pool)
    return PoolSizeView(role=role, replicas=latest.value, version=latest.version, action_id=latest.action_id,
                        standing_down=conflict and overview.action_out(conflict, {pool.id: role}))


@router.post("", response_model=PoolSizeOut)
def request_pool_size(name: DeploymentName, role: PoolRole, body: PoolSizeIn, session: SessionDep,
                      settings: SettingsDep, now: NowDep, actuation: ActuationDep, caller: OperatorDep) -> PoolSizeOut:
    """Asks the pool to run `replicas` instances. Outside the policy's bounds or GPU budget: 409, nothing
    recorded. Otherwise a request is recorded and the pool reconciled at once, as for a rebalance. The
    policy's mode decides whether the change is recorded (observe), waits for approval (approve) or is applied
    (auto); a scaler then makes the platform run it. While an action on the pool's size is in flight a
    request for the same size joins it and another is refused (409), as it is while moectl stands down."""
    with session.begin():
        deployment, pool = _pool(session, name, role)
        _, policy = policies.active(session, deployment)
        step = check_pool_size(policy, role=role, replicas=body.replicas,
                               current=POOL_SIZE.versions.latest(session, pool).value, gpus_per_instance=pool.ep_size,
                               other_pools_gpus=pools.other_pools_gpus(session, deployment, pool, settings, now))
        if body.dry_run or not step.is_allowed:
            decision = ("resize" if step.is_change else "keep") if step.is_allowed else "refused"
            answer = PoolSizeOut(role=role, replicas=body.replicas, current=step.current, decision=decision,
                                 reason=step.reason, request_id=None, action=None)
            if body.dry_run:
                return answer
            raise HTTPException(409, f"{name}/{role}: {step.reason}")
        ask = requests.Ask(KnobKind.pool_size, "manual", caller.name,
                           value={"replicas": body.replicas, "note": body.note})
        request = requests.record(session, pool, ask, now=now)
        is_reconciled = actuation.reconcile(session, deployment, pool, now=now) is not None
        action = session.get(Action, request.action_id) if request.action_id else None
        outcome = request.outcome if is_reconciled else FOR_THE_LEADER
        answer = PoolSizeOut(role=role, replicas=body.replicas, current=step.current, decision=(
            "pending" if not is_reconciled else "refused" if outcome.startswith("refused")
            else "keep" if outcome.startswith("kept") else "resize"), reason=outcome, request_id=request.id,
            action=action and overview.action_out(action, {pool.id: role}))
    if answer.decision == "refused":  # the refused request stays in the audit trail
        raise HTTPException(409, f"{name}/{role}: {outcome}")
    return answer


@router.post("/resume", response_model=ActionOut)
def resume_pool_size(name: DeploymentName, role: PoolRole, session: SessionDep, now: NowDep,
                     actuation: ActuationDep, caller: OperatorDep) -> ActionOut:
    """After moectl stood down from the pool (a `conflict` action): manage its size again. The leader's next
    pass applies moectl's latest size, whatever the other writer set; a writer still present (an HPA) makes
    it stand down again."""
    with session.begin():
        _, pool = _pool(session, name, role)
        conflict = actuation.standing_down(session, pool)
        if conflict is None:
            raise HTTPException(409, f"moectl does not stand down from {name}/{role}: nothing to resume")
        actuation.resume(conflict, resumed_by=caller.name, now=now)
        return overview.action_out(conflict, {pool.id: role})
