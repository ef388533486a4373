"""Leader election through the database (outside Kubernetes, or without a Lease): one row of `leaders`,
compared-and-set by (holder, term, renewed_at). The fence reads it with FOR UPDATE inside the transaction it
guards, so on PostgreSQL a takeover waits until that write committed (SQLite serialises writers anyway).

A replica paused inside such a transaction (a renewal, a fenced write) would hold a takeover off for as long
as it is paused. On PostgreSQL its session is ended after one lease instead
(idle_in_transaction_session_timeout), and what it had not committed is lost, as it should be."""

from __future__ import annotations

from sqlalchemy import insert, select, text, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, sessionmaker

from controlplane.leader.elector import LeaderRecord
from controlplane.store.tables import Leader


class DatabaseRecords:
    """lease_seconds: how long a paused transaction that locks the row may keep it (PostgreSQL)."""

    def __init__(self, sessions: sessionmaker[Session], *, lease_seconds: float, name: str = "moectl"):
        self.sessions, self.name, self.lease_seconds = sessions, name, lease_seconds
        self.where = f"database row leaders/{name}"

    def _bound_locks(self, session: Session) -> None:
        if session.get_bind().dialect.name == "postgresql":
            milliseconds = max(1, int(self.lease_seconds * 1000))
            session.execute(text(f"SET LOCAL idle_in_transaction_session_timeout = {milliseconds}"))

    def read(self, session: Session | None = None) -> LeaderRecord | None:
        if session is None:
            with self.sessions() as own:
                return self._read(own, lock=False)
        return self._read(session, lock=True)

    def _read(self, session: Session, *, lock: bool) -> LeaderRecord | None:
        query = select(Leader.holder, Leader.term, Leader.lease_seconds, Leader.renewed_at).where(
            Leader.name == self.name)
        if lock:
            self._bound_locks(session)
        row = session.execute(query.with_for_update() if lock else query).one_or_none()
        return None if row is None else LeaderRecord(row.holder, row.term, row.lease_seconds, row.renewed_at)

    def create(self, record: LeaderRecord) -> bool:
        try:
            with self.sessions() as session, session.begin():
                session.execute(insert(Leader).values(name=self.name, holder=record.holder, term=record.term,
                                                      lease_seconds=record.lease_seconds,
                                                      renewed_at=record.renewed_at))
        except IntegrityError:
            return False
        return True

    def replace(self, expected: LeaderRecord, record: LeaderRecord) -> bool:
        with self.sessions() as session, session.begin():
            self._bound_locks(session)
            done = session.execute(update(Leader).where(
                Leader.name == self.name, Leader.holder == expected.holder, Leader.term == expected.term,
                Leader.renewed_at == expected.renewed_at).values(
                holder=record.holder, term=record.term, lease_seconds=record.lease_seconds,
                renewed_at=record.renewed_at))
            return done.rowcount == 1
