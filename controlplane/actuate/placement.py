"""The placement knob: slot -> expert tables (with per-slot traffic shares), versioned per pool."""

from __future__ import annotations

import numpy as np
from sqlalchemy.orm import Session

from controlplane.store import placements
from controlplane.store.arrays import pack, unpack
from controlplane.store.tables import Action, Pool

# slot_to_expert, slot_share: [num_layers, num_slots]; a None share splits an expert's tokens evenly
Table = tuple[np.ndarray, np.ndarray | None]


class PlacementKnob:
    kind = "placement"

    def latest_version(self, session: Session, pool: Pool) -> int:
        return placements.latest(session, pool).version

    def get(self, session: Session, pool: Pool, version: int) -> Table:
        stored = placements.get(session, pool, version)
        if stored is None:
            raise LookupError(f"pool {pool.id} has no placement v{version}")
        return stored.slot_to_expert, stored.slot_share

    def add(self, session: Session, pool: Pool, *, version: int, value: Table, action_id: int, now: float) -> None:
        slot_to_expert, slot_share = value
        placements.add(session, pool=pool, version=version, slot_to_expert=slot_to_expert, slot_share=slot_share,
                       action_id=action_id, now=now)

    def keep_proposal(self, action: Action, value: Table) -> None:
        slot_to_expert, slot_share = value
        action.proposal = pack(slot_to_expert)
        action.proposal_share = None if slot_share is None else pack(slot_share)

    def take_proposal(self, action: Action) -> Table:
        share = unpack(action.proposal_share) if action.proposal_share is not None else None
        value = unpack(action.proposal), share
        action.proposal = action.proposal_share = None
        return value


PLACEMENT = PlacementKnob()
