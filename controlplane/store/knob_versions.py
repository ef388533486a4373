"""Every knob's versions per pool (store/versions.py), by what its value is kept in: a placement in two
.npy blobs (store/placements.py), the others whole in one column (None in version 0: not set by moectl).
A new knob is one more line here, its table (store/tables.py) and its migration."""

from __future__ import annotations

from agents.protocol.placement import PlacementTable
from controlplane.store.placements import PlacementColumns
from controlplane.store.tables import Placement, PoolSize, PrefillThreshold, RoutingLimit
from controlplane.store.versions import Column, Versioned

PLACEMENTS: Versioned[PlacementTable] = Versioned(Placement, PlacementColumns())
# max expert groups per token; None: none issued, the agents route with the model's own
ROUTING_LIMITS: Versioned[int | None] = Versioned(RoutingLimit, Column("topk_group"))
# instances a pool should run; None: not sized by moectl (a scaler writes nothing until it is)
POOL_SIZES: Versioned[int | None] = Versioned(PoolSize, Column("replicas"))
# PD-aware local prefill (tokens), on the decode pool; None: the policy's, else the router's default
PREFILL_THRESHOLDS: Versioned[int | None] = Versioned(PrefillThreshold, Column("tokens"))
