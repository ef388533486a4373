"""What the writer needs from a knob: its versions per pool, and a place to keep a proposal while a
person decides. A new knob (pool size) is one more class meeting this."""

from __future__ import annotations

from typing import Protocol, TypeVar

from sqlalchemy.orm import Session

from controlplane.store.tables import Action, Pool

V = TypeVar("V")


class Knob(Protocol[V]):
    """V: the value one version holds (a placement table, a routing limit, a replica count)."""

    kind: str  # the actions' kind and the requests' knob

    def latest_version(self, session: Session, pool: Pool) -> int:
        """The version issued now; every pool starts with version 0."""
        ...

    def get(self, session: Session, pool: Pool, version: int) -> V:
        """The value of `version`; LookupError when the pool has no such version."""
        ...

    def add(self, session: Session, pool: Pool, *, version: int, value: V, action_id: int, now: float) -> None:
        """Stores `value` as `version`, made by the action `action_id`."""
        ...

    def keep_proposal(self, action: Action, value: V) -> None:
        """Keeps a proposed value on its action while it waits for a person."""
        ...

    def take_proposal(self, action: Action) -> V:
        """The value kept by `keep_proposal`, released from the action."""
        ...

    def prune(self, session: Session, pool: Pool, *, before: float, keep: set[int], limit: int) -> int:
        """Deletes versions made before `before` but the newest of them and those in `keep` (at most
        `limit`); returns how many went (controlplane/loop/prune.py)."""
        ...

