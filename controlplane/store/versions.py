"""A knob's versions per pool (placements, routing limits, pool sizes) are rows of one shape: pool_id, version,
action_id (the action that made it), created_at. Version 0, the agents' default, exists from the
pool's creation, so the latest always exists."""

from __future__ import annotations

from typing import TypeVar

from sqlalchemy import select
from sqlalchemy.orm import Session

from controlplane.store.tables import Placement, Pool, PoolSize, RoutingLimit

Row = TypeVar("Row", Placement, RoutingLimit, PoolSize)


def latest(session: Session, row_type: type[Row], pool: Pool) -> Row:
    row = session.scalar(select(row_type).where(row_type.pool_id == pool.id).order_by(row_type.version.desc())
                         .limit(1))
    if row is None:
        raise LookupError(f"pool {pool.id} has no {row_type.__tablename__}")
    return row


def get(session: Session, row_type: type[Row], pool: Pool, version: int) -> Row | None:
    return session.scalar(select(row_type).where(row_type.pool_id == pool.id, row_type.version == version))
