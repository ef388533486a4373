"""One pool's reconcile, under its lock: what each knob's actuation writes with. `Reconciler.reconcile_pool`
(controlplane/loop/reconcile.py) makes one per pool and pass, once it has the pool's lock and active policy."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy.orm import Session

from controlplane.config import Settings
from controlplane.desired import Policy
from controlplane.store.tables import Deployment, Pool


@dataclass(frozen=True)
class PoolPass:
    session: Session  # holds the pool's lock (store.deployments.lock_pool), fenced by the leadership
    deployment: Deployment
    pool: Pool
    policy: Policy  # the deployment's active policy with its engine's rails (plan/engines.py)
    settings: Settings
    now: float  # unix seconds: the pass's clock, one for every knob

    @property
    def hold(self) -> dict:
        """`actuate.in_flight`'s keywords: an action on a knob holds it for the policy's cooldown."""
        return {"policy": self.policy, "window_seconds": self.settings.window_seconds, "now": self.now}
