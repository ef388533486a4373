"""Routing limits: versioned per pool like placements. Version 0 (no limit) is the agents' default."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy.orm import Session

from controlplane.store import versions
from controlplane.store.tables import Pool, RoutingLimit
from controlplane.store.timestamps import seconds, utc


@dataclass(frozen=True)
class StoredRouting:
    version: int
    topk_group: int | None  # max expert groups per token; None: none issued (the model's own)
    created_at: float
    action_id: int | None


def _load(row: RoutingLimit) -> StoredRouting:
    return StoredRouting(row.version, row.topk_group, seconds(row.created_at), row.action_id)


def add(session: Session, *, pool: Pool, version: int, topk_group: int | None, action_id: int | None,
        now: float) -> None:
    session.add(RoutingLimit(pool_id=pool.id, version=version, topk_group=topk_group, action_id=action_id,
                             created_at=utc(now)))
    session.flush()


def latest(session: Session, pool: Pool) -> StoredRouting:
    return _load(versions.latest(session, RoutingLimit, pool))


def get(session: Session, pool: Pool, version: int) -> StoredRouting | None:
    row = versions.get(session, RoutingLimit, pool, version)
    return None if row is None else _load(row)
