"""Placements: versioned slot -> expert tables per pool. Version 0 is the agents' default."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from sqlalchemy import select
from sqlalchemy.orm import Session

from controlplane.store import versions
from controlplane.store.arrays import pack, unpack
from controlplane.store.tables import Placement, Pool
from controlplane.store.timestamps import seconds, utc


@dataclass(frozen=True)
class StoredPlacement:
    """slot_to_expert, slot_share: [num_layers, num_slots]."""

    version: int
    slot_to_expert: np.ndarray
    slot_share: np.ndarray | None
    created_at: float
    action_id: int | None


def stored(row: Placement, decode: Callable[[bytes], np.ndarray] = unpack) -> StoredPlacement:
    """decode: `store.decoded.unpack_for`'s, for a reader that never writes into the arrays."""
    share = decode(row.slot_share) if row.slot_share is not None else None
    return StoredPlacement(row.version, decode(row.slot_to_expert), share, seconds(row.created_at), row.action_id)


def add(session: Session, *, pool: Pool, version: int, slot_to_expert: np.ndarray, slot_share: np.ndarray | None,
        action_id: int | None, now: float) -> None:
    session.add(Placement(pool_id=pool.id, version=version, slot_to_expert=pack(slot_to_expert.astype(np.int64)),
                          slot_share=None if slot_share is None else pack(slot_share.astype(np.float64)),
                          action_id=action_id, created_at=utc(now)))
    session.flush()


def latest(session: Session, pool: Pool) -> StoredPlacement:
    return stored(versions.latest(session, Placement, pool))


def get(session: Session, pool: Pool, version: int) -> StoredPlacement | None:
    row = versions.get(session, Placement, pool, version)
    return None if row is None else stored(row)


def recent(session: Session, pool: Pool, *, since: float) -> list[StoredPlacement]:
    rows = session.scalars(select(Placement).where(Placement.pool_id == pool.id, Placement.created_at >= utc(since))
                           .order_by(Placement.version))
    return [stored(row) for row in rows]
