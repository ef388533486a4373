"""Pool sizes: versioned per pool like placements. Version 0 (replicas None) means moectl has not sized
the pool; a scaler writes nothing to it until a version with replicas exists."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy.orm import Session

from controlplane.store import versions
from controlplane.store.tables import Pool, PoolSize
from controlplane.store.timestamps import seconds, utc


@dataclass(frozen=True)
class StoredPoolSize:
    version: int
    replicas: int | None  # instances; None: not sized by moectl
    created_at: float
    action_id: int | None


def _load(row: PoolSize) -> StoredPoolSize:
    return StoredPoolSize(row.version, row.replicas, seconds(row.created_at), row.action_id)


def add(session: Session, *, pool: Pool, version: int, replicas: int | None, action_id: int | None,
        now: float) -> None:
    session.add(PoolSize(pool_id=pool.id, version=version, replicas=replicas, action_id=action_id,
                         created_at=utc(now)))
    session.flush()


def latest(session: Session, pool: Pool) -> StoredPoolSize:
    return _load(versions.latest(session, PoolSize, pool))


def get(session: Session, pool: Pool, version: int) -> StoredPoolSize | None:
    row = versions.get(session, PoolSize, pool, version)
    return None if row is None else _load(row)
