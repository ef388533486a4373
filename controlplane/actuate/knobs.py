"""Every knob the controller changes, by the kind its actions and requests carry: its versions in the store
and how its proposal waits for a person."""

from __future__ import annotations

from agents.protocol.placement import PlacementTable
from controlplane.actuate.knob import Knob, Predicted
from controlplane.actuate.placement import TableProposal
from controlplane.desired import KnobKind
from controlplane.store.knob_versions import PLACEMENTS, POOL_SIZES, PREFILL_THRESHOLDS, ROUTING_LIMITS

# slot -> expert tables with per-slot traffic shares
PLACEMENT: Knob[PlacementTable] = Knob(KnobKind.placement, PLACEMENTS, TableProposal(), "placement")
# `topk_group`: max expert groups per token; None: none issued, the agents route with the model's own
ROUTING: Knob[int | None] = Knob(KnobKind.routing, ROUTING_LIMITS, Predicted("topk_group_after"), "routing limit")
# instances of the pool; None: not sized by moectl. A `PoolScaler` (actuate/scaler.py) makes the platform run
# it (actuate/scale.py)
POOL_SIZE: Knob[int | None] = Knob(KnobKind.pool_size, POOL_SIZES, Predicted("replicas_after"), "pool size")
# PD-aware local prefill: prompts up to this many uncached tokens prefill on the decode instance; versioned on
# the decode pool, the routers take it from their window's answer. None: the policy's or the router's default
PREFILL_THRESHOLD: Knob[int | None] = Knob(KnobKind.local_prefill_threshold, PREFILL_THRESHOLDS,
                                           Predicted("tokens_after"), "local-prefill threshold")

KNOBS: dict[str, Knob] = {knob.kind: knob for knob in (PLACEMENT, ROUTING, POOL_SIZE, PREFILL_THRESHOLD)}
