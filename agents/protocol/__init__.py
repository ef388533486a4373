"""The contract between agents and the controller: the only package both sides import.

`snapshot`: moectl.v1, one rank's window (Snapshot, its RankCounters).
`desired`: the answer it gets (DesiredState).
`group`: moectl.v2, one snapshot per EP group (GroupSnapshot, RankRow).
`router`: a router's window and the controller's answer to it.
`identity`: who reports (Identity, ModelShape, Role).
`array`: compact arrays.
`running`: the placement a rank runs, for a controller that lost it.
`wire`: the version, names and bounds every message shares.
`placement`: the placement value and the numbers derived from it (replica counts, shares, per-GPU load,
imbalance).
`grid`: the window grid both sides file load on.
`http`: what every server promises its clients' connections.
Every public name is re-exported here.
"""

from agents.protocol.array import MAX_ARRAY_ELEMENTS, Array
from agents.protocol.desired import DesiredState, RoutingLimits
from agents.protocol.grid import window_index, window_start
from agents.protocol.group import GROUP_PROTOCOL_VERSION, GroupSnapshot, RankRow
from agents.protocol.http import KEEP_ALIVE_SECONDS
from agents.protocol.identity import Identity, ModelShape, Role
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
from agents.protocol.running import PLACEMENT_UNKNOWN, RunningPlacement, error_code
from agents.protocol.snapshot import RankCounters, ServingCounters, Snapshot, StepLoad
from agents.protocol.wire import MAX_COUNT, MAX_SECONDS, NAME_PATTERN, PROTOCOL_VERSION, LatencySummary

__all__ = [
    "KEEP_ALIVE_SECONDS", "NUM_PROMPT_BUCKETS", "PROMPT_BUCKET_TOKENS", "prompt_bucket",
    "GROUP_PROTOCOL_VERSION", "GroupSnapshot", "RankRow", "MAX_ARRAY_ELEMENTS", "MAX_COUNT",
    "MAX_SECONDS", "NAME_PATTERN", "PLACEMENT_UNKNOWN", "PROTOCOL_VERSION", "Array", "DesiredState", "Identity",
    "LatencySummary", "ModelShape", "PlacementTable", "RankCounters", "Role", "RouterState", "RouterWindow",
    "RoutingLimits", "RunningPlacement", "ServingCounters", "Snapshot", "StepLoad", "default_slot_to_expert",
    "error_code",
    "effective_share", "even_share", "gpu_load", "imbalance", "layer_imbalance", "replica_counts", "slot_load",
    "window_index", "window_start",
]
