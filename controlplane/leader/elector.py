"""Leader election, written once over a record that can be compared-and-set: a Kubernetes Lease
(leader/lease.py) or a database row (leader/database.py). The algorithm is client-go's:

- A candidate takes a record by compare-and-set when it is free, or unchanged for its holder's lease duration.
  That duration is measured on the candidate's own monotonic clock, so clocks of different machines never meet.
  The term grows by one with every new holder.
- The leader renews every retry period. It trusts its leadership only for `renew_seconds` after the start
  of its last successful renewal: shorter than the lease, so it stops writing before anyone may take over.
- Before each write it checks the record itself (`check`, the fence). A leader whose record was taken, or
  that could not renew in time (a long pause, a partition), writes nothing.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Protocol

from sqlalchemy.orm import Session

from controlplane.actuate.fence import NotLeader

log = logging.getLogger("moectl.leader")


@dataclass(frozen=True)
class LeaderRecord:
    holder: str  # "": released, anyone may take it
    term: int
    lease_seconds: float
    renewed_at: float  # the holder's wall clock, unix seconds: for people, never compared across machines
    revision: str = ""  # what compare-and-set compares (a Lease's resourceVersion); set by the records


class LeaderRecords(Protocol):
    """Where one election is held."""

    where: str  # for people: "Lease ns/name", "database row leaders/moectl"

    def read(self, session: Session | None = None) -> LeaderRecord | None:
        """The record, None when there is none yet; given `session`, inside its transaction, locking it
        until that transaction ends (so a takeover waits for the write it fences)."""
        ...

    def create(self, record: LeaderRecord) -> bool:
        """False when someone created it first."""
        ...

    def replace(self, expected: LeaderRecord, record: LeaderRecord) -> bool:
        """Compare-and-set: False when the stored record is no longer `expected`."""
        ...


class LeaderElector(Protocol):
    """A `Fence` (actuate/fence.py) that can also campaign."""

    identity: str
    where: str

    @property
    def token(self) -> str | None: ...

    def is_leading(self) -> bool: ...

    def check(self, session: Session | None = None) -> None: ...

    def campaign(self) -> bool:
        """Takes the leadership when it is free or expired, renews it when held; True while leading."""
        ...

    def release(self) -> None:
        """Gives the leadership up (a graceful stop), so another replica takes it at once."""
        ...


class Elector:
    """The one LeaderElector: `records` decides where (a Lease or a database row). clock: monotonic seconds."""

    def __init__(self, records: LeaderRecords, *, identity: str, lease_seconds: float, renew_seconds: float,
                 clock: Callable[[], float] = time.monotonic, wall: Callable[[], float] = time.time):
        self.records, self.identity, self.where = records, identity, records.where
        self.lease_seconds, self.renew_seconds, self.clock, self.wall = lease_seconds, renew_seconds, clock, wall
        self._lock = threading.Lock()
        self._held: LeaderRecord | None = None  # the record as we last wrote it, while leading
        self._renew_started = 0.0  # monotonic: when the last successful renewal began
        self._observed: LeaderRecord | None = None  # another holder's record as last seen, and since when
        self._observed_since = 0.0

    @property
    def token(self) -> str | None:
        held = self._held
        return None if held is None else f"{self.identity}#{held.term}"

    @property
    def term(self) -> int | None:
        held = self._held
        return None if held is None else held.term

    def is_leading(self) -> bool:
        return self._held is not None and self.clock() < self._renew_started + self.renew_seconds

    def check(self, session: Session | None = None) -> None:
        held = self._held
        if held is None or not self.is_leading():
            raise NotLeader(f"{self.identity} does not lead: no renewal of {self.where} within "
                            f"{self.renew_seconds:g}s" if held else f"{self.identity} does not lead")
        stored = self.records.read(session)
        if stored is None or (stored.holder, stored.term) != (self.identity, held.term):
            self._lose(stored)
            raise NotLeader(f"{self.where} passed from {self.identity} (term {held.term}) to "
                            f"{stored.holder if stored else 'nobody'} (term {stored.term if stored else '-'})")
        if not self.is_leading():  # the read may have waited for a lock: the deadline counts after it
            raise NotLeader(f"{self.identity}'s leadership expired while checking {self.where}")

    def campaign(self) -> bool:
        with self._lock:
            started = self.clock()
            stored = self.records.read()
            fresh = LeaderRecord(self.identity, 0, self.lease_seconds, self.wall())
            if stored is None:
                return self._won(fresh, started) if self.records.create(fresh) else False
            held = self._held
            if held is not None and (stored.holder, stored.term) == (self.identity, held.term):
                renewed = replace(stored, lease_seconds=self.lease_seconds, renewed_at=fresh.renewed_at)
                if self.records.replace(stored, renewed):
                    return self._won(renewed, started)
                self._lose(None)
                return False
            if held is not None:
                self._lose(stored)
            if stored != self._observed:
                self._observed, self._observed_since = stored, started
            if stored.holder and started - self._observed_since < stored.lease_seconds:
                return False
            taken = replace(fresh, term=stored.term + 1)
            return self._won(taken, started) if self.records.replace(stored, taken) else False

    def release(self) -> None:
        with self._lock:
            held = self._held
            if held is None:
                return
            self._held = None
            stored = self.records.read()
            if stored is not None and (stored.holder, stored.term) == (self.identity, held.term):
                self.records.replace(stored, replace(stored, holder="", renewed_at=self.wall()))
                log.info("%s released %s (term %d)", self.identity, self.where, held.term)

    def _won(self, record: LeaderRecord, started: float) -> bool:
        if self._held is None or self._held.term != record.term:
            log.info("%s leads through %s (term %d)", self.identity, self.where, record.term)
        self._held, self._renew_started = record, started
        return True

    def _lose(self, stored: LeaderRecord | None) -> None:
        if self._held is not None:
            log.warning("%s no longer leads: %s is held by %s", self.identity, self.where,
                        stored.holder if stored else "someone else")
        self._held = None
