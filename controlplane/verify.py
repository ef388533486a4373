"""Verify: the step of a reconcile that judges applied changes once they have been measured.

The verdict is the planner's (`plan.verify_change`, pure); what comes of it is written by `actuate`:
verified, or rolled back (the version before re-issued), or failed when a later change already
replaced the one measured worse.
"""

from __future__ import annotations

from sqlalchemy.orm import Session

from controlplane.actuate import change
from controlplane.actuate.placement import PLACEMENT
from controlplane.actuate.pool_size import POOL_SIZE
from controlplane.actuate.routing import ROUTING
from controlplane.desired import Policy, VerifyOutcome
from controlplane.observed import PoolState
from controlplane.plan import verify_change
from controlplane.store import actions
from controlplane.store.tables import Action, Pool


def verify_pool(session: Session, pool: Pool, state: PoolState, policy: Policy, now: float) -> None:
    """Settles applied changes once measured; one that made things worse is rolled back (`actuate.change`)."""
    for action in actions.awaiting_verification(session, pool):
        if action.kind == POOL_SIZE.kind:
            continue  # verified once the platform runs it (actuate/scale.py)
        if action.kind == ROUTING.kind:
            _verify_routing(session, pool, action, state, policy, now)
            continue
        prior = (action.inputs.get("measured_imbalance") or [None])[-1]
        if prior is None or action.version is None:
            change.settle(session, PLACEMENT, pool=pool, action=action, outcome=VerifyOutcome.verified, measured={},
                          now=now)
            continue
        outcome, measured = verify_change(policy, state, action.version, prior)
        if outcome != VerifyOutcome.wait:
            change.settle(session, PLACEMENT, pool=pool, action=action, outcome=outcome, now=now,
                          measured={"imbalance_after": round(measured, 4), "imbalance_before": prior})


def _verify_routing(session: Session, pool: Pool, action: Action, state: PoolState, policy: Policy,
                    now: float) -> None:
    """Records the all-to-all share measured under the new limit once enough windows ran under it."""
    after = [w.all2all_share for w in state.windows
             if w.start >= (state.routing_changed_at or now) and w.all2all_share is not None]
    if len(after) < policy.verify_windows:
        return
    before = action.inputs.get("all2all_share") or []
    measured = {"all2all_share_after": round(sum(after) / len(after), 4),
                "all2all_share_before": round(sum(before) / len(before), 4) if before else None}
    change.settle(session, ROUTING, pool=pool, action=action, outcome=VerifyOutcome.verified, measured=measured,
                  now=now)
