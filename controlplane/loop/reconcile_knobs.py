"""What one pool's plan changes, knob by knob, inside `reconcile_pool` (controlplane/loop/reconcile.py), under the
pool's lock: the placement (or the in-flight action a request joins), the group limit, a person's pool size,
the roll-back of a change that cut MTP acceptance, and the platform brought to the pool's size. Every write
goes through `actuate.change`, versioned and audited."""

from __future__ import annotations

import logging

from sqlalchemy.orm import Session

from agents.protocol.placement import PlacementTable
from controlplane.actuate import change
from controlplane.actuate.fence import Fence, NotLeader
from controlplane.actuate.in_flight import in_flight, join
from controlplane.actuate.knobs import KNOBS
from controlplane.actuate.placement import PLACEMENT
from controlplane.actuate.pool_size import POOL_SIZE
from controlplane.actuate.routing import ROUTING
from controlplane.actuate.scale import standing_down, sync_pool_size
from controlplane.actuate.scaler import PoolScaler
from controlplane.config import Settings
from controlplane.desired import Decision, Plan, Policy
from controlplane.loop.verify import roll_back
from controlplane.observed.pool import PoolState
from controlplane.plan.diagnose import MtpDiagnosis
from controlplane.plan.placement import check_pool_size
from controlplane.solve.routing import RoutingStep
from controlplane.store import actions, parks, pool_sizes, pools, requests, tokens
from controlplane.store.tables import Action, Deployment, Pool, Request

log = logging.getLogger("moectl.reconcile")


def actuate_placement(session: Session, deployment: Deployment, pool: Pool, policy: Policy, plan: Plan,
                      pending: list[Request], settings: Settings, now: float) -> tuple[Action | None, bool]:
    """Returns the action the plan made, or the one in flight the requests joined, and whether it is new."""
    if plan.decision != Decision.rebalance and not pending:
        return None, False
    alerts = [alert for request in pending for alert in request.alerts]
    current = in_flight(session, pool, PLACEMENT.kind, policy=policy, window_seconds=settings.window_seconds, now=now)
    if current is not None:
        if not pending:
            return None, False
        join(current, alerts=alerts, now=now)
        return current, False
    if plan.decision != Decision.rebalance:
        return None, False
    trigger, created_by = (pending[0].trigger, pending[0].created_by) if pending else ("loop", tokens.LOOP)
    action = change.propose(session, PLACEMENT, deployment=deployment, pool=pool,
                            value=PlacementTable(plan.change.slot_to_expert, plan.change.slot_share), policy=policy,
                            reason=plan.reason, inputs=plan.inputs, predicted=plan.change.predicted(),
                            trigger=trigger, created_by=created_by, alerts=alerts, now=now)
    return action, action is not None


def actuate_routing(session: Session, deployment: Deployment, pool: Pool, state: PoolState, policy: Policy,
                    settings: Settings, now: float, step: RoutingStep) -> None:
    """Proposes the routing limit `step` (plan_routing's, on `state`) when it changes the one in force."""
    if step.unparked is not None:
        parks.release(session, pool=pool, knob=ROUTING.kind, reason=step.unparked, now=now)
    if not step.is_change_from(state.topk_group):
        return
    if in_flight(session, pool, ROUTING.kind, policy=policy, window_seconds=settings.window_seconds,
                 now=now) is not None:
        return
    windows_used = [w for w in state.windows if w.start >= (state.routing_changed_at or 0.0)]
    windows_used = windows_used[-policy.sustained_windows:]
    recall = [w.ratio("routing_recall_sum", "routing_recall_count") for w in windows_used]
    measured_recall = [r for r in recall if r is not None]
    at_model_limit = state.model_topk_group is None or state.effective_topk_group >= state.model_topk_group
    # recall (against the unconstrained top-k) under the model's own limit: what later recall is judged against
    reference = (sum(measured_recall) / len(measured_recall) if measured_recall else None) if at_model_limit \
        else state.recall_reference
    inputs = {"all2all_share": [round(w.all2all_share or 0.0, 4) for w in windows_used],
              "routing_recall": [round(r, 4) for r in measured_recall], "recall_reference": reference,
              "windows": [w.index for w in windows_used], "topk_group": state.topk_group}
    predicted = {"topk_group_before": state.topk_group, "topk_group_after": step.topk_group}
    if step.effect is not None:
        predicted["effect"] = step.effect.to_json()
    change.propose(session, ROUTING, deployment=deployment, pool=pool, value=step.topk_group, policy=policy,
                   reason=step.reason, inputs=inputs, trigger="loop", created_by=tokens.LOOP, now=now,
                   predicted=predicted)
    log.info("%s/%s: routing %s -> %s (%s)", deployment.name, pool.role, state.topk_group, step.topk_group,
             step.reason)


def roll_back_regression(session: Session, deployment: Deployment, pool: Pool, state: PoolState,
                         mtp: MtpDiagnosis, settings: Settings, now: float) -> PoolState:
    """MTP acceptance fell under its floor right after a change: that change is reverted and its knob parked."""
    action = session.get(Action, mtp.action_id)
    if action is None or action.status not in (actions.APPLIED, actions.VERIFIED):
        return state
    roll_back(session, KNOBS[action.kind], pool=pool, action=action, state=state, reason=mtp.reason,
              measured=action.measured | {"verdict": mtp.reason}, now=now)
    log.info("%s/%s: rolled back action %d (%s)", deployment.name, pool.role, action.id, mtp.reason)
    return pools.read_state(session, deployment, pool, now=now, settings=settings)


def actuate_pool_size(session: Session, deployment: Deployment, pool: Pool, policy: Policy, settings: Settings,
                      now: float) -> None:
    """A person's pool size (until the pool planner decides them): each pending request is checked against the
    policy's bounds and GPU budget, and makes an action, joins the one in flight asking the same size, or is
    refused; never while moectl stands down from the pool."""
    for request in requests.pending(session, pool, knob=POOL_SIZE.kind):
        replicas, action = request.value["replicas"], None
        current = in_flight(session, pool, POOL_SIZE.kind, policy=policy, window_seconds=settings.window_seconds,
                            now=now)
        step = check_pool_size(policy, role=pool.role, replicas=replicas,
                               current=pool_sizes.latest(session, pool).replicas, gpus_per_instance=pool.ep_size,
                               other_pools_gpus=pools.other_pools_gpus(session, deployment, pool, settings, now))
        conflict = standing_down(session, pool)
        if conflict is not None:
            outcome = f"refused: moectl stands down from this pool (action {conflict.id}); resume it first"
        elif not step.is_allowed:
            outcome = f"refused: {step.reason}"
        elif current is not None and current.predicted.get("replicas_after") == replicas:
            action, outcome = current, f"joined action {current.id} ({current.status})"
        elif current is not None:
            outcome = (f"refused: action {current.id} ({current.status}, "
                       f"{current.predicted.get('replicas_after')} replicas) is in flight")
        elif not step.is_change:
            outcome = f"kept: {step.reason}"
        else:
            note = (request.value.get("note") or "").strip()
            action = change.propose(session, POOL_SIZE, deployment=deployment, pool=pool, value=replicas,
                                    policy=policy, reason=f"asked by {request.created_by}: {step.reason}"
                                    + (f" ({note})" if note else ""), inputs={"replicas": replicas},
                                    predicted=step.predicted(), trigger=request.trigger,
                                    created_by=request.created_by, now=now)
            outcome = f"action {action.id} {action.status}" if action else "policy mode is off"
        requests.settle(request, outcome=outcome, action_id=action.id if action else None, now=now)


def sync_pool_size_or_retry(session: Session, deployment: Deployment, pool: Pool, scaler: PoolScaler,
                            fence: Fence, policy: Policy, now: float) -> None:
    """The platform unreachable keeps the pool's size as it is until a later pass, never its other knobs."""
    try:
        sync_pool_size(session, deployment, pool, scaler, fence, policy, now)
    except NotLeader:
        raise
    except Exception:
        log.exception("%s/%s: could not bring the pool to its size; retrying next pass", deployment.name, pool.role)
