"""What one pool's pass writes in its write phase (`Reconciler.write`, controlplane/loop/reconcile.py), under the
pool's lock: every knob's proposal (controlplane/loop/proposals.py) in one loop, a person's pool size, and the
platform brought to the pool's size. Every change goes through
`actuate.change`, versioned and audited."""

from __future__ import annotations

import logging

from controlplane.actuate import change
from controlplane.actuate.fence import Fence, NotLeader
from controlplane.actuate.in_flight import in_flight, join
from controlplane.actuate.pool_pass import PoolPass
from controlplane.actuate.scale import standing_down, sync_pool_size
from controlplane.actuate.scaler import PoolScaler
from controlplane.loop.proposals import Proposal
from controlplane.plan.pool_size import check_pool_size
from controlplane.store import actions, pools, requests
from controlplane.store.knobs import KNOBS, PLACEMENT, POOL_SIZE
from controlplane.store.tables import Action, Request

log = logging.getLogger("moectl.reconcile")


def actuate(p: PoolPass, made: list[Proposal], pending: list[Request]) -> tuple[Action | None, bool]:
    """Writes each knob's proposal through the one writer, unless an action on that knob is in flight (the pending
    placement requests join the placement's) or, for the pool size, moectl stands down from the pool. Returns the
    placement action the requests are answered with, and whether it is new."""
    answer: tuple[Action | None, bool] = (None, False)
    if pending:
        current = in_flight(p.session, p.pool, PLACEMENT.kind, **p.hold)
        if current is not None:
            join(current, alerts=[alert for request in pending for alert in request.alerts], now=p.now)
            answer = (current, False)
    for proposal in made:
        if in_flight(p.session, p.pool, proposal.kind, **p.hold) is not None:
            continue
        if proposal.kind == POOL_SIZE.kind and standing_down(p.session, p.pool) is not None:
            continue
        action = change.propose(p.session, KNOBS[proposal.kind], p.pool, proposal.value, proposal.entry,
                                policy=p.policy, now=p.now)
        if proposal.kind == PLACEMENT.kind:
            answer = (action, action is not None)
        elif action is not None:
            log.info("%s/%s: %s", p.deployment.name, p.pool.role, proposal.summary)
    return answer


def actuate_pool_size(p: PoolPass, pending: list[Request]) -> None:
    """A person's pool size (until the pool planner decides them): `pending`, the pool's size requests, oldest
    first. Each is checked against the policy's bounds and GPU budget. It makes an action, joins the one in flight
    asking the same size, or is refused; never while moectl stands down from the pool."""
    session, deployment, pool, policy, settings, now = p.session, p.deployment, p.pool, p.policy, p.settings, p.now
    for request in pending:
        replicas, action = request.value["replicas"], None
        current = in_flight(session, pool, POOL_SIZE.kind, **p.hold)
        step = check_pool_size(policy, role=pool.role, replicas=replicas,
                               current=POOL_SIZE.versions.latest(session, pool).value, gpus_per_instance=pool.ep_size,
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
