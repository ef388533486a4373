"""What the writer needs from a knob: its versions per pool, and a place to keep a proposal while a person
decides. `Knob` is every knob: the store's versions of it (store/knob_versions.py) and how its proposal waits
on its action (`Proposal`); a new knob is one more of them in actuate/knobs.py."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

from sqlalchemy.orm import Session

from controlplane.desired import KnobKind
from controlplane.store.tables import Action, Pool
from controlplane.store.versions import Versioned

V = TypeVar("V")


class Proposal(Protocol[V]):
    """How a proposed value waits on its action for a person's approval."""

    def keep(self, action: Action, value: V) -> None:
        """Keeps a proposed value on its action while it waits for a person."""
        ...

    def take(self, action: Action) -> V:
        """The value kept by `keep`, released from the action."""
        ...


@dataclass(frozen=True)
class Predicted(Generic[V]):
    """A proposal of one number: the action's predicted effect already holds it, under `key`."""

    key: str

    def keep(self, action: Action, value: V) -> None:
        pass

    def take(self, action: Action) -> V:
        return action.predicted[self.key]


@dataclass(frozen=True)
class Knob(Generic[V]):
    """V: the value one version holds (a placement table, a routing limit, a replica count).

    kind: the actions' kind and the requests' knob; label: its name in messages."""

    kind: KnobKind
    versions: Versioned[V]
    proposal: Proposal[V]
    label: str

    def latest_version(self, session: Session, pool: Pool) -> int:
        """The version issued now; every pool starts with version 0."""
        return self.versions.latest(session, pool).version

    def get(self, session: Session, pool: Pool, version: int) -> V:
        """The value of `version`; LookupError when the pool has no such version."""
        stored = self.versions.get(session, pool, version)
        if stored is None:
            raise LookupError(f"pool {pool.id} has no {self.label} v{version}")
        return stored.value

    def add(self, session: Session, pool: Pool, *, version: int, value: V, action_id: int, now: float) -> None:
        """Stores `value` as `version`, made by the action `action_id`."""
        self.versions.add(session, pool=pool, version=version, value=value, action_id=action_id, now=now)

    def keep_proposal(self, action: Action, value: V) -> None:
        self.proposal.keep(action, value)

    def take_proposal(self, action: Action) -> V:
        return self.proposal.take(action)

    def prune(self, session: Session, pool: Pool, *, before: float, keep: set[int], limit: int) -> int:
        """Deletes versions made before `before` but the newest of them and those in `keep` (at most
        `limit`); returns how many went (controlplane/loop/prune.py)."""
        return self.versions.prune(session, pool, before=before, keep=keep, limit=limit)
