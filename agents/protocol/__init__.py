"""The contract between agents and the controller: the only package both sides import.

wire: what one round trip carries (Snapshot, DesiredState, compact arrays); group: moectl.v2, one snapshot per
EP group (GroupSnapshot, RankRow); router: a router's window and the controller's answer to it; placement: the placement
value and the numbers derived from it (replica counts, shares, per-GPU load, imbalance); grid: the
window grid both sides file load on; http: what every server promises its clients' connections.
Every public name is re-exported here.
"""

from agents.protocol.grid import window_index, window_start
from agents.protocol.group import GROUP_PROTOCOL_VERSION, GroupSnapshot, RankRow
from agents.protocol.http import KEEP_ALIVE_SECONDS
from agents.protocol.placement import (
    PlacementTable,
    default_slot_to_expert,
    effective_share,
    even_share,
    gpu_load,
    imbalance,
    layer_imbalance,
    replica_counts,
    slot_load,
)
from agents.protocol.router import NUM_PROMPT_BUCKETS, PROMPT_BUCKET_TOKENS, RouterState, RouterWindow, prompt_bucket
from agents.protocol.wire import (
    MAX_ARRAY_ELEMENTS,
    MAX_COUNT,
    MAX_SECONDS,
    NAME_PATTERN,
    PLACEMENT_UNKNOWN,
    PROTOCOL_VERSION,
    Array,
    DesiredState,
    Identity,
    LatencySummary,
    ModelShape,
    Role,
    RoutingLimits,
    RunningPlacement,
    ServingCounters,
    Snapshot,
    error_code,
)

__all__ = [
    "KEEP_ALIVE_SECONDS", "NUM_PROMPT_BUCKETS", "PROMPT_BUCKET_TOKENS", "prompt_bucket",
    "GROUP_PROTOCOL_VERSION", "GroupSnapshot", "RankRow",
    "MAX_ARRAY_ELEMENTS", "MAX_COUNT", "MAX_SECONDS", "NAME_PATTERN", "PLACEMENT_UNKNOWN", "PROTOCOL_VERSION",
    "Array", "DesiredState", "Identity", "LatencySummary", "ModelShape", "PlacementTable", "Role", "RouterState",
    "RouterWindow", "RoutingLimits", "RunningPlacement", "ServingCounters", "Snapshot", "default_slot_to_expert",
    "error_code", "effective_share", "even_share",
    "gpu_load", "imbalance", "layer_imbalance", "replica_counts", "slot_load", "window_index", "window_start",
]
