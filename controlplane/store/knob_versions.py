"""Every knob's versions per pool (store/versions.py). A placement is two .npy blobs in its own table
(store/placements.py). The others are a number in the shared `KnobVersion` table (None in version 0: not set by
moectl), so a new one-number knob is one more line here, with no table nor migration."""

from __future__ import annotations

from agents.protocol.placement import PlacementTable
from controlplane.desired import KnobKind
from controlplane.store.placements import PlacementColumns
from controlplane.store.tables import KnobVersion, Placement
from controlplane.store.versions import Column, Versioned

PLACEMENTS: Versioned[PlacementTable] = Versioned(Placement, PlacementColumns())
_NUMBER: Column[int | None] = Column("value")
# max expert groups per token; None: none issued, the agents route with the model's own
ROUTING_LIMITS: Versioned[int | None] = Versioned(KnobVersion, _NUMBER, KnobKind.routing)
# instances a pool should run; None: not sized by moectl (a scaler writes nothing until it is)
POOL_SIZES: Versioned[int | None] = Versioned(KnobVersion, _NUMBER, KnobKind.pool_size)
# PD-aware local prefill (tokens), on the decode pool; None: the policy's, else the router's default
PREFILL_THRESHOLDS: Versioned[int | None] = Versioned(KnobVersion, _NUMBER, KnobKind.local_prefill_threshold)
