"""The API's one way into the loop: the pool scaler and the leadership. A person's or an alert's request
is reconciled at once on the replica that leads (its writes fenced); a replica that does not lead only records
it, and the leader's next pass handles it."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy.orm import Session

from controlplane.actuate.fence import SOLE, Fence, guard
from controlplane.actuate.scaler import PoolScaler
from controlplane.config import Settings
from controlplane.loop.reconcile import PoolResult, reconcile_pool, reconcile_requested
from controlplane.store.tables import Deployment, Pool

FOR_THE_LEADER = "recorded; this replica does not lead: the leader handles it on its next pass"


@dataclass(frozen=True)
class Actuation:
    scaler: PoolScaler | None = None
    fence: Fence = SOLE

    def reconcile(self, session: Session, deployment: Deployment, pool: Pool, settings: Settings, *,
                  now: float) -> PoolResult | None:
        """reconcile_pool on the leader; None on a replica that does not lead."""
        if not self.fence.is_leading():
            return None
        guard(session, self.fence)
        return reconcile_pool(session, deployment, pool, settings, now=now, scaler=self.scaler, fence=self.fence)

    def preview(self, session: Session, deployment: Deployment, pool: Pool, settings: Settings, *,
                now: float) -> PoolResult:
        """What a rebalance would do now, on any replica: a forced dry run that writes nothing."""
        return reconcile_pool(session, deployment, pool, settings, now=now, dry_run=True, is_forced=True)

    def reconcile_requested(self, session: Session, deployment: Deployment, pool: Pool, settings: Settings, *,
                            now: float) -> None:
        """`reconcile_requested` on the leader (a storm of triggers costs one plan); nothing elsewhere."""
        if self.fence.is_leading():
            guard(session, self.fence)
            reconcile_requested(session, deployment, pool, settings, now=now, scaler=self.scaler, fence=self.fence)
