"""How a placement is kept in its version table: slot -> expert and per-slot shares as .npy blobs. The
table read back carries its row's version (version 0: the agents' default)."""

from __future__ import annotations

from typing import Any

import numpy as np

from agents.protocol.placement import PlacementTable
from controlplane.store.arrays import pack
from controlplane.store.tables import Placement
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
