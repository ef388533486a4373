"""A knob's versions per pool (placements, routing limits, pool sizes, prefill thresholds) are rows of one
shape: pool_id, version, action_id (the action that made it), created_at. Version 0, the agents' default,
exists from the pool's creation, so the latest always exists."""

from __future__ import annotations

from typing import TypeVar

from sqlalchemy import ColumnElement, and_, func, select
from sqlalchemy.orm import Session, aliased

from controlplane.store.batches import delete_some
from controlplane.store.tables import Placement, Pool, PoolSize, PrefillThreshold, RoutingLimit
from controlplane.store.timestamps import utc

Row = TypeVar("Row", Placement, RoutingLimit, PoolSize, PrefillThreshold)


def latest(session: Session, row_type: type[Row], pool: Pool) -> Row:
    row = session.scalar(select(row_type).where(row_type.pool_id == pool.id).order_by(row_type.version.desc())
                         .limit(1))
    if row is None:
        raise LookupError(f"pool {pool.id} has no {row_type.__tablename__}")
    return row


def is_newest(row_type: type[Row], pool_id: ColumnElement[int]) -> ColumnElement[bool]:
    """Join criterion: the row is the newest version of the pool whose id `pool_id` is (a column of another
    table of the query, e.g. an aliased Pool's id; the max is correlated to it)."""
    other = aliased(row_type)
    newest = select(func.max(other.version)).where(other.pool_id == pool_id).scalar_subquery()
    return and_(row_type.pool_id == pool_id, row_type.version == newest)


def get(session: Session, row_type: type[Row], pool: Pool, version: int) -> Row | None:
    return session.scalar(select(row_type).where(row_type.pool_id == pool.id, row_type.version == version))


def prune(session: Session, row_type: type[Row], pool: Pool, *, before: float, keep: set[int], limit: int) -> int:
    """Deletes the pool's versions made before `before`, except the newest of those (in force, or the one
    the newer versions replaced) and those in `keep`. Returns how many went."""
    old = (row_type.pool_id == pool.id, row_type.created_at < utc(before))
    newest_old = session.scalar(select(row_type.version).where(*old).order_by(row_type.version.desc()).limit(1))
    if newest_old is None:
        return 0
    return delete_some(session, row_type, *old, row_type.version < newest_old, row_type.version.not_in(keep),
                       limit=limit)
