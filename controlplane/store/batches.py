"""Deleting in bounded batches: the pruning job never holds a long write lock, whatever it finds."""

from __future__ import annotations

from sqlalchemy import ColumnElement, delete, select
from sqlalchemy.orm import Session

from controlplane.store.tables import Base


def delete_some(session: Session, table: type[Base], *where: ColumnElement[bool], limit: int) -> int:
    """Deletes at most `limit` rows of `table` matching `where`, oldest ids first. Returns how many went."""
    ids = list(session.scalars(select(table.id).where(*where).order_by(table.id).limit(limit)))
    if ids:
        session.execute(delete(table).where(table.id.in_(ids)))
    return len(ids)
