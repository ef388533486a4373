"""How a proposed placement waits on its action for a person: its tables as .npy blobs (the table is too
large for the action's predicted effect, which holds only its summary)."""

from __future__ import annotations

from agents.protocol.placement import PlacementTable
from controlplane.store.arrays import pack, unpack
from controlplane.store.tables import Action


class TableProposal:
    """`knob.Proposal` of a `PlacementTable`; the version a proposed table carries is not kept: the writer
    numbers versions."""

    def keep(self, action: Action, value: PlacementTable) -> None:
        action.proposal = pack(value.slot_to_expert)
        action.proposal_share = None if value.slot_share is None else pack(value.slot_share)

    def take(self, action: Action) -> PlacementTable:
        share = unpack(action.proposal_share) if action.proposal_share is not None else None
        value = PlacementTable(unpack(action.proposal), share)
        action.proposal = action.proposal_share = None
        return value
