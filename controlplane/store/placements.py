"""How a placement is kept: in its version table, and on its action while a person decides on it. Slot -> expert
and per-slot shares are .npy blobs: the table is too large for the action's predicted effect, which holds only its
summary. The table read back carries its row's version (version 0: the agents' default)."""

from __future__ import annotations

from typing import Any

import numpy as np

from agents.protocol.placement import PlacementTable
from controlplane.store.arrays import pack, unpack
from controlplane.store.tables import Action, Placement
from controlplane.store.versions import Decode


class PlacementColumns:
    """`versions.Codec` of `PlacementTable`s: slot_to_expert [num_layers, num_slots] int64, slot_share the same
    shape float64 or None (an even split)."""

    def to_columns(self, value: PlacementTable) -> dict[str, Any]:
        share = value.slot_share
        return {"slot_to_expert": pack(value.slot_to_expert.astype(np.int64)),
                "slot_share": None if share is None else pack(share.astype(np.float64))}

    def from_row(self, row: Placement, decode: Decode) -> PlacementTable:
        share = decode(row.slot_share) if row.slot_share is not None else None
        return PlacementTable(decode(row.slot_to_expert), share, row.version)


class TableProposal:
    """`knobs.ProposalKeeper` of a `PlacementTable`; the version a proposed table carries is not kept: the writer
    numbers versions."""

    def keep(self, action: Action, value: PlacementTable) -> None:
        action.proposal = pack(value.slot_to_expert)
        action.proposal_share = None if value.slot_share is None else pack(value.slot_share)

    def take(self, action: Action) -> PlacementTable:
        share = unpack(action.proposal_share) if action.proposal_share is not None else None
        value = PlacementTable(unpack(action.proposal), share)
        action.proposal = action.proposal_share = None
        return value
