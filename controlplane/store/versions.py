"""A knob's versions per pool (placements, routing limits, pool sizes, prefill thresholds) are rows of one
shape: pool_id, version, action_id (the action that made it), created_at, and the columns its value is kept
in. `Versioned` reads and writes that shape once for every knob. A knob brings only its `Codec` (value <->
columns), and its name where its table holds several knobs (`KnobVersion`). Version 0, the agents' default,
exists from the pool's creation, so the latest always exists."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

import numpy as np
from sqlalchemy import ColumnElement, and_, func, select
from sqlalchemy.orm import Session, aliased
from sqlalchemy.orm.util import AliasedClass

from controlplane.store.arrays import unpack
from controlplane.store.batches import delete_some
from controlplane.store.tables import Pool
from controlplane.store.timestamps import seconds, utc

V = TypeVar("V")
Decode = Callable[[bytes], np.ndarray]  # a blob's array: `store.arrays.unpack`, or `store.decoded.unpack_for`'s


class VersionRow(Protocol):
    """A table of a knob's versions (store/tables.py); its value columns are its codec's."""

    pool_id: Any
    version: Any
    action_id: Any
    created_at: Any


@dataclass(frozen=True)
class Version(Generic[V]):
    version: int
    value: V
    created_at: float  # unix seconds
    action_id: int | None  # the action that made it; None: version 0, or written outside an action


class Codec(Protocol[V]):
    """A knob's value <-> the columns of its version table."""

    def to_columns(self, value: V) -> dict[str, Any]: ...

    def from_row(self, row: Any, decode: Decode) -> V: ...


@dataclass(frozen=True)
class Column(Generic[V]):
    """A value kept whole in one column: a replica count, a routing limit, a threshold (None: not set)."""

    name: str

    def to_columns(self, value: V) -> dict[str, Any]:
        return {self.name: value}

    def from_row(self, row: Any, decode: Decode) -> V:
        return getattr(row, self.name)


@dataclass(frozen=True)
class Hundredths:
    """A fraction kept in an integer column as hundredths (the capacity factor 1.25 as 125): a knob of the shared
    `KnobVersion` table whose value is not a count needs no column nor migration of its own."""

    name: str

    def to_columns(self, value: float | None) -> dict[str, Any]:
        return {self.name: None if value is None else round(value * 100)}

    def from_row(self, row: Any, decode: Decode) -> float | None:
        stored = getattr(row, self.name)
        return None if stored is None else stored / 100


@dataclass(frozen=True)
class Versioned(Generic[V]):
    """One knob's versions: `row_type` its table, `codec` how its value is kept there, `knob` its rows' name in
    a table of several knobs (None: the table is this knob's alone)."""

    row_type: type[VersionRow]
    codec: Codec[V]
    knob: str | None = None

    def of_row(self, row: VersionRow, decode: Decode = unpack) -> Version[V]:
        """decode: `store.decoded.unpack_for`'s, for a reader that never writes into the arrays."""
        return Version(row.version, self.codec.from_row(row, decode), seconds(row.created_at), row.action_id)

    def add(self, session: Session, *, pool: Pool, version: int, value: V, action_id: int | None,
            now: float) -> None:
        mine = {} if self.knob is None else {"knob": self.knob}
        session.add(self.row_type(pool_id=pool.id, version=version, action_id=action_id, created_at=utc(now),
                                  **mine, **self.codec.to_columns(value)))
        session.flush()

    def latest(self, session: Session, pool: Pool) -> Version[V]:
        rows = self.row_type
        row = session.scalar(select(rows).where(*self._of(rows, pool.id)).order_by(rows.version.desc()).limit(1))
        if row is None:
            raise LookupError(f"pool {pool.id} has no {self.knob or rows.__tablename__} versions")
        return self.of_row(row)

    def get(self, session: Session, pool: Pool, version: int) -> Version[V] | None:
        rows = self.row_type
        row = session.scalar(select(rows).where(*self._of(rows, pool.id), rows.version == version))
        return None if row is None else self.of_row(row)

    def recent(self, session: Session, pool: Pool, *, since: float) -> list[Version[V]]:
        """The versions made at or after `since`, oldest first."""
        rows = self.row_type
        found = session.scalars(select(rows).where(*self._of(rows, pool.id), rows.created_at >= utc(since))
                                .order_by(rows.version))
        return [self.of_row(row) for row in found]

    def is_newest(self, rows: type[VersionRow] | AliasedClass, pool_id: ColumnElement[int]) -> ColumnElement[bool]:
        """Join criterion: `rows` is this knob's newest version of the pool whose id `pool_id` is. `rows` is the
        knob's table, or an alias of it where a query joins it twice. `pool_id` is a column of another table of
        the query, e.g. an aliased Pool's id; the max is correlated to it."""
        other = aliased(self.row_type)
        newest = select(func.max(other.version)).where(*self._of(other, pool_id)).scalar_subquery()
        return and_(*self._of(rows, pool_id), rows.version == newest)

    def prune(self, session: Session, pool: Pool, *, before: float, keep: set[int], limit: int) -> int:
        """Deletes the pool's versions made before `before`, except the newest of those (in force, or the one
        the newer versions replaced) and those in `keep`. Returns how many went."""
        rows = self.row_type
        old = (*self._of(rows, pool.id), rows.created_at < utc(before))
        newest_old = session.scalar(select(rows.version).where(*old).order_by(rows.version.desc()).limit(1))
        if newest_old is None:
            return 0
        return delete_some(session, rows, *old, rows.version < newest_old, rows.version.not_in(keep), limit=limit)

    def _of(self, rows: Any, pool_id: Any) -> tuple[ColumnElement[bool], ...]:
        """The criteria of this knob's rows of the pool `pool_id` (an id or a column)."""
        mine = (rows.pool_id == pool_id,)
        return mine if self.knob is None else (*mine, rows.knob == self.knob)
