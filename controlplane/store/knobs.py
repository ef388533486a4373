"""Every knob the controller changes, in one place: by the kind its actions and requests carry, its versions per
pool (store/versions.py) and how its proposal waits on its action for a person. A placement is two .npy blobs in
its own table (store/placements.py); the others are a number in the shared `KnobVersion` table (None in version
0: not set by moectl). A new one-number knob is one more `Knob` here and its `KnobKind`, with no table nor
migration."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

from sqlalchemy.orm import Session

from agents.protocol.placement import PlacementTable
from controlplane.desired import KnobKind
from controlplane.store.placements import PlacementColumns, TableProposal
from controlplane.store.tables import Action, KnobVersion, Placement, Pool
from controlplane.store.versions import Column, Hundredths, Versioned

V = TypeVar("V")


class ProposalKeeper(Protocol[V]):
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
    proposal: ProposalKeeper[V]
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

    def prune(self, session: Session, pool: Pool, *, before: float, keep: set[int], limit: int) -> int:
        """Deletes versions made before `before` but the newest of them and those in `keep` (at most
        `limit`); returns how many went (controlplane/loop/prune.py)."""
        return self.versions.prune(session, pool, before=before, keep=keep, limit=limit)


def _number(kind: KnobKind) -> Versioned[int | None]:
    return Versioned(KnobVersion, Column("value"), kind)


# slot -> expert tables with per-slot traffic shares
PLACEMENT: Knob[PlacementTable] = Knob(KnobKind.placement, Versioned(Placement, PlacementColumns()), TableProposal(),
                                       "placement")
# `topk_group`: max expert groups per token; None: none issued, the agents route with the model's own
ROUTING: Knob[int | None] = Knob(KnobKind.routing, _number(KnobKind.routing), Predicted("topk_group_after"),
                                 "routing limit")
# instances of the pool; None: not sized by moectl. A `PoolScaler` (actuate/scaler.py) makes the platform run it
# (actuate/scale.py), and writes nothing until it is sized
POOL_SIZE: Knob[int | None] = Knob(KnobKind.pool_size, _number(KnobKind.pool_size), Predicted("replicas_after"),
                                   "pool size")
# PD-aware local prefill: prompts up to this many uncached tokens prefill on the decode instance; versioned on the
# decode pool, the routers take it from their window's answer. None: the policy's, else the router's default
PREFILL_THRESHOLD: Knob[int | None] = Knob(KnobKind.local_prefill_threshold,
                                           _number(KnobKind.local_prefill_threshold), Predicted("tokens_after"),
                                           "local-prefill threshold")

# the per-expert capacity factor: each expert takes at most this multiple of an even share of a step's tokens, the
# rest of its assignments dropped (agents/telemetry/agent.py); kept in hundredths. None: no cap
CAPACITY_FACTOR: Knob[float | None] = Knob(KnobKind.expert_capacity,
                                           Versioned(KnobVersion, Hundredths("value"), KnobKind.expert_capacity),
                                           Predicted("factor_after"), "capacity factor")

KNOBS: dict[str, Knob] = {knob.kind: knob for knob in (PLACEMENT, ROUTING, POOL_SIZE, PREFILL_THRESHOLD,
                                                       CAPACITY_FACTOR)}
# the one-number knobs of the pool itself that its plan reads in force (`PoolState.in_force`, store/pools.py
# `read_state`) and its agents are answered with (store/in_force.py); the pool size and the prefill threshold are
# read with the deployment's PD view instead
IN_POOL_STATE: tuple[Knob, ...] = (ROUTING, CAPACITY_FACTOR)
