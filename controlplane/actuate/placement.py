"""The placement knob: slot -> expert tables (with per-slot traffic shares), versioned per pool."""

from __future__ import annotations

from sqlalchemy.orm import Session

from agents.protocol.placement import PlacementTable
from controlplane.store import placements, versions
from controlplane.store.arrays import pack, unpack
from controlplane.store.tables import Action, Placement, Pool


class PlacementKnob:
    """Values are `PlacementTable`s; the version a proposed table carries is not read: the writer numbers
    versions."""

    kind = "placement"

    def latest_version(self, session: Session, pool: Pool) -> int:
        return placements.latest(session, pool).version

    def get(self, session: Session, pool: Pool, version: int) -> PlacementTable:
        stored = placements.get(session, pool, version)
        if stored is None:
            raise LookupError(f"pool {pool.id} has no placement v{version}")
        return PlacementTable(stored.slot_to_expert, stored.slot_share, stored.version)

    def add(self, session: Session, pool: Pool, *, version: int, value: PlacementTable, action_id: int,
            now: float) -> None:
        placements.add(session, pool=pool, version=version, slot_to_expert=value.slot_to_expert,
                       slot_share=value.slot_share, action_id=action_id, now=now)

    def keep_proposal(self, action: Action, value: PlacementTable) -> None:
        action.proposal = pack(value.slot_to_expert)
        action.proposal_share = None if value.slot_share is None else pack(value.slot_share)

    def take_proposal(self, action: Action) -> PlacementTable:
        share = unpack(action.proposal_share) if action.proposal_share is not None else None
        value = PlacementTable(unpack(action.proposal), share)
        action.proposal = action.proposal_share = None
        return value

    def prune(self, session: Session, pool: Pool, *, before: float, keep: set[int], limit: int) -> int:
        return versions.prune(session, Placement, pool, before=before, keep=keep, limit=limit)


PLACEMENT = PlacementKnob()
