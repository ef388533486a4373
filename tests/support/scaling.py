"""A moectl deployment whose pools a `PoolScaler` sizes, driven through the one reconcile path: requests as
a person's API call records them, then the pool's reconcile (on SQLite: the database side is tested elsewhere)."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from controlplane.actuate.fence import SOLE, Fence, guard
from controlplane.actuate.scale import resume
from controlplane.actuate.scaler import PoolScaler
from controlplane.config import Settings
from controlplane.desired import Policy
from controlplane.loop.reconcile import Reconciler
from controlplane.store import deployments, requests
from controlplane.store.db import make_engine, make_sessions, upgrade
from controlplane.store.knobs import POOL_SIZE
from controlplane.store.tables import Action, Request
from support.store import make_pool

ROLES = ("decode", "prefill", "unified")
POLICY = Policy(mode="auto", cooldown_seconds=0, replicas={role: {"min": 0, "max": 6} for role in ROLES})


@dataclass
class ScaledDeployment:
    """Deployment 'tiny' with a pool per role, reconciled with `scaler`; `now` moves by hand."""

    sessions: sessionmaker[Session]
    settings: Settings
    scaler: PoolScaler
    now: float = 1_800_000_000.0

    @classmethod
    def create(cls, database_url: str, scaler: PoolScaler, policy: Policy = POLICY, *,
               roles: tuple[str, ...] = ROLES, ep_size: dict[str, int] | None = None, now: float | None = None,
               **settings) -> ScaledDeployment:
        """roles: the pools made; ep_size: role -> the pool's ranks (its GPUs per replica to the pool planner);
        now: the clock's start; settings: over the defaults (1 s windows, no leader election)."""
        upgrade(database_url)
        settings = Settings(**{"database_url": database_url, "window_seconds": 1.0, "leader_election": False}
                            | settings)
        sessions = make_sessions(make_engine(database_url, timeout_seconds=settings.db_timeout_seconds))
        made = cls(sessions, settings, scaler) if now is None else cls(sessions, settings, scaler, now)
        with sessions() as session, session.begin():
            for role in roles:
                make_pool(session, now=made.now, role=role, policy=policy, **({"ep_size": ep_size[role]}
                                                                             if ep_size and role in ep_size else {}))
        return made

    def reconcile(self, role: str, *, replicas: int | None = None, fence: Fence = SOLE) -> Request | None:
        """One reconcile of the pool (a pass moves the clock 2 s); with `replicas`, a person asked for them
        first. Returns that request, handled."""
        self.now += 2.0
        with self.sessions() as session, session.begin():
            guard(session, fence)
            deployment = deployments.get(session, "tiny")
            pool = deployments.get_pool(session, deployment, role)
            request = None
            if replicas is not None:
                ask = requests.Ask(POOL_SIZE.kind, "manual", "alice", value={"replicas": replicas})
                request = requests.record(session, pool, ask, now=self.now)
            Reconciler(self.settings, self.scaler, fence).reconcile_pool(session, deployment, pool, now=self.now)
            return request

    def resume(self, action_id: int) -> None:
        """What a person's POST .../size/resume does."""
        with self.sessions() as session, session.begin():
            resume(session.get(Action, action_id), resumed_by="alice", now=self.now)

    def actions(self, role: str) -> list[Action]:
        """The pool's pool-size actions, oldest first."""
        with self.sessions() as session:
            pool = deployments.get_pool(session, deployments.get(session, "tiny"), role)
            return list(session.scalars(select(Action).where(Action.pool_id == pool.id,
                                                             Action.kind == POOL_SIZE.kind).order_by(Action.id)))
