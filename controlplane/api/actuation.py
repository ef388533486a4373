"""The API's one way into the loop and actuation: the pool scaler and the leadership. A person's or an alert's
request is reconciled at once on the replica that leads (its writes fenced); a replica that does not lead only
records it, and the leader's next pass handles it. A person's verdict on a waiting action, a fleet's adopted
placement and a resumed pool size are written here through `actuate`, as the loop writes its own."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy.orm import Session

from agents.protocol.placement import PlacementTable
from controlplane.actuate import change, scale
from controlplane.actuate.change import Running
from controlplane.actuate.fence import guard
from controlplane.desired import Policy
from controlplane.loop.reconcile import Reconciler
from controlplane.loop.results import PoolResult
from controlplane.store.knobs import KNOBS, PLACEMENT
from controlplane.store.tables import Action, Deployment, Pool

FOR_THE_LEADER = "recorded; this replica does not lead: the leader handles it on its next pass"


@dataclass(frozen=True)
class Actuation:
    reconciler: Reconciler  # the loop's scaler and leadership; it plans in this process

    def reconcile(self, session: Session, deployment: Deployment, pool: Pool, *, now: float) -> PoolResult | None:
        """The pool's reconcile on the leader; None on a replica that does not lead."""
        if not self.reconciler.fence.is_leading():
            return None
        guard(session, self.reconciler.fence)
        return self.reconciler.reconcile_pool(session, deployment, pool, now=now)

    def preview(self, session: Session, deployment: Deployment, pool: Pool, *, now: float) -> PoolResult:
        """What a rebalance would do now, on any replica: a forced dry run that writes nothing."""
        return self.reconciler.reconcile_pool(session, deployment, pool, now=now, dry_run=True, is_forced=True)

    def reconcile_requested(self, session: Session, deployment: Deployment, pool: Pool, *, now: float) -> None:
        """`Reconciler.reconcile_requested` on the leader (a storm of triggers costs one plan); nothing elsewhere."""
        if self.reconciler.fence.is_leading():
            guard(session, self.reconciler.fence)
            self.reconciler.reconcile_requested(session, deployment, pool, now=now)

    def approve(self, session: Session, pool: Pool, action: Action, *, approved_by: str, now: float) -> None:
        """Applies a waiting action the caller claimed (superseded if what it changes moved on)."""
        change.approve(session, KNOBS[action.kind], pool=pool, action=action, approved_by=approved_by, now=now)

    def reject(self, action: Action, *, rejected_by: str, now: float) -> None:
        change.reject(KNOBS[action.kind], action=action, rejected_by=rejected_by, now=now)

    def adopt_placement(self, session: Session, pool: Pool, running: Running[PlacementTable], *,
                        policy: Policy, created_by: str, now: float) -> Action:
        """Records the table a fleet runs as its version, which this controller never issued (a restored
        database)."""
        return change.adopt(session, PLACEMENT, pool, running, policy=policy, created_by=created_by, now=now)

    def standing_down(self, session: Session, pool: Pool) -> Action | None:
        """The conflict that keeps moectl off the pool's size, until a person resumes it."""
        return scale.standing_down(session, pool)

    def resume(self, conflict: Action, *, resumed_by: str, now: float) -> None:
        scale.resume(conflict, resumed_by=resumed_by, now=now)
