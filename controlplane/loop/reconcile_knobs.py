"""What one pool's plan changes, knob by knob, inside `Reconciler.pool` (controlplane/loop/reconcile.py), under the
pool's lock: the placement (or the in-flight action a request joins), the group limit, a person's pool size,
the roll-back of a change that cut MTP acceptance, and the platform brought to the pool's size. Every write
goes through `actuate.change`, versioned and audited."""

from __future__ import annotations

import logging

from agents.protocol.placement import PlacementTable
from controlplane.actuate import change
from controlplane.actuate.fence import Fence, NotLeader
from controlplane.actuate.in_flight import in_flight, join
from controlplane.actuate.knobs import KNOBS, PLACEMENT, POOL_SIZE, ROUTING
from controlplane.actuate.pool_pass import PoolPass
from controlplane.actuate.scale import standing_down, sync_pool_size
from controlplane.actuate.scaler import PoolScaler
from controlplane.desired import Decision, Plan
from controlplane.loop.verify import roll_back
from controlplane.observed.pool import PoolState
from controlplane.plan.diagnose import MtpDiagnosis
from controlplane.plan.placement import check_pool_size
from controlplane.solve.routing import RoutingStep
from controlplane.store import actions, parks, pools, requests, tokens
from controlplane.store.knob_versions import POOL_SIZES
from controlplane.store.tables import Action, Request

log = logging.getLogger("moectl.reconcile")


def actuate_placement(p: PoolPass, plan: Plan, pending: list[Request]) -> tuple[Action | None, bool]:
    """Returns the action the plan made, or the one in flight the requests joined, and whether it is new."""
    if plan.decision != Decision.rebalance and not pending:
        return None, False
    alerts = [alert for request in pending for alert in request.alerts]
    current = in_flight(p.session, p.pool, PLACEMENT.kind, **p.hold)
    if current is not None:
        if not pending:
            return None, False
        join(current, alerts=alerts, now=p.now)
        return current, False
    if plan.decision != Decision.rebalance:
        return None, False
    trigger, created_by = (pending[0].trigger, pending[0].created_by) if pending else ("loop", tokens.LOOP)
    entry = actions.Entry(plan.reason, plan.inputs, plan.change.predicted(), trigger, created_by, alerts)
    action = change.propose(p.session, PLACEMENT, p.pool, PlacementTable(plan.change.slot_to_expert,
                                                                         plan.change.slot_share),
                            entry, policy=p.policy, now=p.now)
    return action, action is not None


def actuate_routing(p: PoolPass, state: PoolState, step: RoutingStep) -> None:
    """Proposes the routing limit `step` (plan_routing's, on `state`) when it changes the one in force."""
    if step.unparked is not None:
        parks.release(p.session, pool=p.pool, knob=ROUTING.kind, reason=step.unparked, now=p.now)
    if not step.is_change_from(state.topk_group):
        return
    if in_flight(p.session, p.pool, ROUTING.kind, **p.hold) is not None:
        return
    policy = p.policy
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
    change.propose(p.session, ROUTING, p.pool, step.topk_group, actions.Entry(step.reason, inputs, predicted),
                   policy=policy, now=p.now)
    log.info("%s/%s: routing %s -> %s (%s)", p.deployment.name, p.pool.role, state.topk_group, step.topk_group,
             step.reason)


def roll_back_regression(p: PoolPass, state: PoolState, mtp: MtpDiagnosis) -> PoolState:
    """MTP acceptance fell under its floor right after a change: that change is reverted and its knob parked."""
    action = p.session.get(Action, mtp.action_id)
    if action is None or action.status not in (actions.APPLIED, actions.VERIFIED):
        return state
    roll_back(p.session, KNOBS[action.kind], pool=p.pool, action=action, state=state, reason=mtp.reason,
              measured=action.measured | {"verdict": mtp.reason}, now=p.now)
    log.info("%s/%s: rolled back action %d (%s)", p.deployment.name, p.pool.role, action.id, mtp.reason)
    return pools.read_state(p.session, p.deployment, p.pool, now=p.now, settings=p.settings)


def actuate_pool_size(p: PoolPass) -> None:
    """A person's pool size (until the pool planner decides them): each pending request is checked against the
    policy's bounds and GPU budget, and makes an action, joins the one in flight asking the same size, or is
    refused; never while moectl stands down from the pool."""
    session, deployment, pool, policy, settings, now = p.session, p.deployment, p.pool, p.policy, p.settings, p.now
    for request in requests.pending(session, pool, knob=POOL_SIZE.kind):
        replicas, action = request.value["replicas"], None
        current = in_flight(session, pool, POOL_SIZE.kind, **p.hold)
        step = check_pool_size(policy, role=pool.role, replicas=replicas,
                               current=POOL_SIZES.latest(session, pool).value, gpus_per_instance=pool.ep_size,
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
            entry = actions.Entry(f"asked by {request.created_by}: {step.reason}" + (f" ({note})" if note else ""),
                                  {"replicas": replicas}, step.predicted(), request.trigger, request.created_by)
            action = change.propose(session, POOL_SIZE, pool, replicas, entry, policy=policy, now=now)
            outcome = f"action {action.id} {action.status}" if action else "policy mode is off"
        requests.settle(request, outcome=outcome, action_id=action.id if action else None, now=now)


def sync_pool_size_or_retry(p: PoolPass, scaler: PoolScaler, fence: Fence) -> None:
    """The platform unreachable keeps the pool's size as it is until a later pass, never its other knobs."""
    try:
        sync_pool_size(p, scaler, fence)
    except NotLeader:
        raise
    except Exception:
        log.exception("%s/%s: could not bring the pool to its size; retrying next pass", p.deployment.name,
                      p.pool.role)
