"""Makes the platform run the pool size moectl decided (the latest `pool_size` version), level-triggered:
each pass reads the pool's scale and, when it differs, writes it through a `PoolScaler`.

moectl never fights another writer of the replica count. An autoscaler of the same target (an HPA, or
KEDA's), or replicas changed by someone else since moectl last wrote them, make it stand down from the
pool. A `conflict` action says why and who. Nothing is written to the pool until a person resumes it
(`resume`, audited on that action); then moectl's latest size is applied again. Every write and every
refusal is reported to the platform (`PoolScaler.report`).

On a full cluster the platform leaves some of the asked replicas unplaced (Kubernetes: pods Pending,
`Insufficient nvidia.com/gpu`). Each pass records how many on the action that applied the size (`UNSCHEDULABLE`,
read by the pool planner's input, controlplane/loop/reconcile_pools.py: not starting, and no more asked while
any are) and says so once per change, as a Warning Event; placed again, a Normal one.
"""

from __future__ import annotations

import logging

from sqlalchemy import select
from sqlalchemy.orm import Session

from controlplane.actuate import change
from controlplane.actuate.fence import Fence
from controlplane.actuate.pool_pass import PoolPass
from controlplane.actuate.scaler import OtherWriter, PoolRef, PoolScaler, ScaleState
from controlplane.desired import VerifyOutcome
from controlplane.store import actions, tokens
from controlplane.store.knobs import POOL_SIZE
from controlplane.store.tables import Action, Pool
from controlplane.store.timestamps import utc

log = logging.getLogger("moectl.scale")
# on an action: the replicas moectl wrote to the platform, or found it running, for it; a later change by someone
# else is measured against the newest such
APPLIED = "replicas_applied"
UNSCHEDULABLE = "replicas_unschedulable"  # on the same action: asked replicas the platform cannot place now


def standing_down(session: Session, pool: Pool) -> Action | None:
    """The conflict that keeps moectl off the pool's size, until a person resumes it."""
    return actions.open_for(session, pool, since=0.0, kind=POOL_SIZE.kind, statuses=(actions.CONFLICT,))


def resume(conflict: Action, *, resumed_by: str, now: float) -> None:
    actions.settle(conflict, status=actions.RESUMED, now=now,
                   measured=conflict.measured | {"resumed_by": resumed_by, "resumed_at": now})


def sync_pool_size(p: PoolPass, scaler: PoolScaler, fence: Fence) -> None:
    session, pool, now = p.session, p.pool, p.now
    ref = PoolRef(p.deployment.name, pool.role)
    if not scaler.manages(ref) or standing_down(session, pool) is not None:
        return
    state = scaler.read(ref)
    if state.autoscalers:
        _stand_down(p, scaler, state, writer=", ".join(state.autoscalers),
                    why=f"{' and '.join(state.autoscalers)} also scale {state.target}")
        return
    desired = POOL_SIZE.versions.latest(session, pool)
    if desired.value is None:
        return  # not sized by moectl: whatever runs stays
    newest, applied = last_applied(session, pool)
    if applied is not None and state.replicas != applied and not state.is_ours:
        _stand_down(p, scaler, state, writer=state.writer or "another writer",
                    why=f"{state.writer or 'another writer'} set {state.target} to {state.replicas} replicas "
                        f"after moectl set {applied}")
        return
    made_by = session.get(Action, desired.action_id)
    _note_unschedulable(p, scaler, newest or made_by, state)
    if state.replicas != desired.value:
        state = _write(p, scaler, fence, made_by, state, desired.value)
        if state is None:
            return
    elif applied is None:  # it runs moectl's size already: from now on a change by someone else is a conflict
        holder = newest or made_by
        holder.measured = holder.measured | {APPLIED: desired.value, "target": state.target}
    if made_by.status == actions.APPLIED and state.running == desired.value:
        change.settle(session, POOL_SIZE, pool=pool, action=made_by, outcome=VerifyOutcome.verified, now=now,
                      measured=made_by.measured | {"replicas_running": state.running})


def _write(p: PoolPass, scaler: PoolScaler, fence: Fence, made_by: Action, state: ScaleState,
           replicas: int) -> ScaleState | None:
    """Writes `replicas`; None when another writer raced it (moectl then stands down)."""
    ref = PoolRef(p.deployment.name, p.pool.role)
    leaving = []
    if replicas < state.replicas:
        leaving = scaler.prepare_scale_down(ref, state.replicas - replicas, fence=fence)
    try:
        after = scaler.set_replicas(ref, replicas, expected=state.replicas, fence=fence)
    except OtherWriter as raced:
        _stand_down(p, scaler, raced.state, writer=raced.state.writer or "another writer", why=str(raced))
        return None
    made_by.measured = made_by.measured | {APPLIED: replicas, "replicas_before": state.replicas,
                                           "target": state.target, "leaving": leaving}
    made_by.updated_at = utc(p.now)
    message = f"moectl set {state.target} from {state.replicas} to {replicas} replicas (action {made_by.id}: " \
              f"{made_by.reason})" + (f"; leaving: {', '.join(leaving)}" if leaving else "")
    scaler.report(ref, reason="Scaled", message=message)
    log.info("%s: %s", ref, message)
    return after


def _note_unschedulable(p: PoolPass, scaler: PoolScaler, holder: Action, state: ScaleState) -> None:
    """Records on `holder` (the action whose size runs) how many replicas cannot be placed, and says so when
    that changes: a Warning Event while some cannot be, a Normal one once all are placed."""
    before = holder.measured.get(UNSCHEDULABLE, 0)
    if state.num_unschedulable == before:
        return
    holder.measured = holder.measured | {UNSCHEDULABLE: state.num_unschedulable,
                                         "unschedulable_reason": state.unschedulable_reason}
    ref = PoolRef(p.deployment.name, p.pool.role)
    if state.num_unschedulable:
        message = (f"{state.num_unschedulable} of {state.replicas} replicas of {state.target} cannot be placed "
                   f"({state.unschedulable_reason or 'no reason given'}): moectl counts them as not starting and "
                   f"asks for no more replicas until they are placed (action {holder.id})")
        scaler.report(ref, reason="Unschedulable", message=message, is_warning=True)
        log.warning("%s: %s", ref, message)
    else:
        scaler.report(ref, reason="Placed", message=f"every replica of {state.target} is placed again; moectl "
                                                     f"sizes the pool freely (action {holder.id})")


def _stand_down(p: PoolPass, scaler: PoolScaler, state: ScaleState, *, writer: str, why: str) -> None:
    deployment, pool = p.deployment, p.pool
    ref = PoolRef(deployment.name, pool.role)
    reason = (f"{why}: moectl stands down from {ref} and leaves its size to them until a person resumes it "
              f"(POST /v1/deployments/{deployment.name}/pools/{pool.role}/size/resume)")
    entry = actions.Entry(reason, inputs={"writer": writer, "target": state.target, "replicas": state.replicas,
                                          "autoscalers": list(state.autoscalers)}, created_by=tokens.LOOP)
    action = actions.record(p.session, pool, entry, kind=POOL_SIZE.kind, mode=p.policy.mode.value,
                            status=actions.CONFLICT, now=p.now)
    scaler.report(ref, reason="ScaleConflict", message=f"action {action.id}: {reason}", is_warning=True)
    log.warning("%s: %s", ref, reason)


def last_applied(session: Session, pool: Pool) -> tuple[Action | None, int | None]:
    """The newest pool-size action that applied replicas or resumed moectl, and the replicas it applied: None
    when none did, or when a person resumed moectl since (then nothing is held against the replicas found).
    The pruning job keeps that action (controlplane/loop/prune.py)."""
    recent = session.scalars(select(Action).where(Action.pool_id == pool.id, Action.kind == POOL_SIZE.kind,
                                                  Action.status != actions.CONFLICT)
                             .order_by(Action.updated_at.desc(), Action.id.desc()).limit(100))
    for action in recent:
        if APPLIED in action.measured or action.status == actions.RESUMED:
            return action, action.measured.get(APPLIED)
    return None, None
