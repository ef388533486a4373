"""Leader election through the database (outside Kubernetes, or without a Lease): one row of `leaders`,
compared-and-set by (holder, term, renewed_at). The fence reads it with FOR UPDATE inside the transaction it
guards, so on PostgreSQL a takeover waits until that write committed (SQLite serialises writers anyway)."""

from __future__ import annotations

from sqlalchemy import insert, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, sessionmaker

from controlplane.leader.elector import LeaderRecord
from controlplane.store.tables import Leader


class DatabaseRecords:
    def __init__(self, sessions: sessionmaker[Session], name: str = "moectl"):
        self.sessions, self.name = sessions, name
        self.where = f"database row leaders/{name}"

    def read(self, session: Session | None = None) -> LeaderRecord | None:
        if session is None:
            with self.sessions() as own:
                return self._read(own, lock=False)
        return self._read(session, lock=True)

    def _read(self, session: Session, *, lock: bool) -> LeaderRecord | None:
        query = select(Leader.holder, Leader.term, Leader.lease_seconds, Leader.renewed_at).where(
            Leader.name == self.name)
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
            done = session.execute(update(Leader).where(
                Leader.name == self.name, Leader.holder == expected.holder, Leader.term == expected.term,
                Leader.renewed_at == expected.renewed_at).values(
                holder=record.holder, term=record.term, lease_seconds=record.lease_seconds,
                renewed_at=record.renewed_at))
            return done.rowcount == 1
