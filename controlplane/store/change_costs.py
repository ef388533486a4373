"""A pool's measured change cost (controlplane/observed/measured_cost.py), one row per pool, kept past its windows."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from controlplane.observed.measured_cost import MeasuredCost
from controlplane.store.observed_tables import ChangeCost
from controlplane.store.tables import Pool
from controlplane.store.timestamps import utc


def read(session: Session, pool: Pool) -> MeasuredCost | None:
    row = session.scalars(select(ChangeCost).where(ChangeCost.pool_id == pool.id)).one_or_none()
    return None if row is None else MeasuredCost(row.num_measured, row.mean_seconds, row.last_seconds,
                                                 row.last_window_index)


def write(session: Session, pool: Pool, measured: MeasuredCost, *, now: float) -> None:
    """Stores the pool's measure (the loop writes it under the pool's lock: one writer)."""
    row = session.scalars(select(ChangeCost).where(ChangeCost.pool_id == pool.id)).one_or_none()
    if row is None:
        row = ChangeCost(pool_id=pool.id)
        session.add(row)
    row.num_measured, row.mean_seconds, row.last_seconds = measured.num_measured, measured.mean_seconds, \
        measured.last_seconds
    row.last_window_index, row.updated_at = measured.last_window_index, utc(now)
    session.flush()
