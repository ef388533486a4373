"""The pool-size knob: how many instances a pool runs, versioned per pool. A version is what moectl wants;
a `PoolScaler` (actuate/scaler.py) makes the platform run it (actuate/scale.py)."""

from __future__ import annotations

from sqlalchemy.orm import Session

from controlplane.store import pool_sizes, versions
from controlplane.store.tables import Action, Pool, PoolSize


class PoolSizeKnob:
    """Values are replica counts (instances of the pool); version 0 holds None: not sized by moectl."""

    kind = "pool_size"

    def latest_version(self, session: Session, pool: Pool) -> int:
        return pool_sizes.latest(session, pool).version

    def get(self, session: Session, pool: Pool, version: int) -> int | None:
        stored = pool_sizes.get(session, pool, version)
        if stored is None:
            raise LookupError(f"pool {pool.id} has no pool size v{version}")
        return stored.replicas

    def add(self, session: Session, pool: Pool, *, version: int, value: int | None, action_id: int,
            now: float) -> None:
        pool_sizes.add(session, pool=pool, version=version, replicas=value, action_id=action_id, now=now)

    def keep_proposal(self, action: Action, value: int | None) -> None:
        pass  # a size is one number: the action's predicted effect already holds it

    def take_proposal(self, action: Action) -> int | None:
        return action.predicted["replicas_after"]

    def prune(self, session: Session, pool: Pool, *, before: float, keep: set[int], limit: int) -> int:
        return versions.prune(session, PoolSize, pool, before=before, keep=keep, limit=limit)


POOL_SIZE = PoolSizeKnob()
