"""One window of an engine's EP group -> the `moectl.v2` group snapshot our own agents post. Pure.

An engine outside moectl reports its group's load as per-logical-expert counts (SGLang's recorder sums them
over the group, vLLM's rearrange all-reduces them): that is the snapshot's `expert_tokens`. Neither says what
each physical slot processed. So `slot_tokens` is the load the running placement implies (each expert's tokens
split evenly over its replicas, agents/protocol/placement.py), the same number the controller would derive.
The measured imbalance is then the placement's on the measured load. The engine's own serving counters ride
on rank 0's row; the other ranks' rows say only the placement they run.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from agents.protocol import Array, GroupSnapshot, ModelShape, PlacementTable, RankRow, Role
from agents.protocol.group import MAX_FAULT_CAUSES


@dataclass(frozen=True)
class Where:
    """Who an adapter reports as, from its flags: the deployment, its EP group (instance) and the group's pool."""

    deployment: str
    instance: str
    role: Role
    gpus_per_node: int = 8


@dataclass(frozen=True)
class GroupPlace:
    """Who reports: the deployment, the group (instance) and its pool, and its layout."""

    deployment: str
    instance: str
    role: Role
    ep_size: int
    slots_per_rank: int
    gpus_per_node: int = 8


def group_snapshot(place: GroupPlace, model: ModelShape, window_start: float, window_seconds: float,
                   expert_tokens: np.ndarray, running: PlacementTable, rank0_fields: dict,
                   faults: dict[str, int] | None = None) -> GroupSnapshot:
    """expert_tokens: [num_layers, num_experts] tokens over the window; running: the group's table
    [num_layers, ep_size * slots_per_rank] and its version; rank0_fields: RankCounters values for rank 0
    (agents/adapters/serving.py); faults: the adapter's failures since its last posted window, cause -> count (None or
    {}: none). Raises pydantic's ValidationError where the numbers do not fit the model."""
    load = np.asarray(expert_tokens, dtype=np.int64)
    slot_tokens = np.rint(running.slot_load(load)).astype(np.int64)
    rows = [RankRow(rank=rank, placement_version=running.version, **(rank0_fields if rank == 0 else {}))
            for rank in range(place.ep_size)]
    return GroupSnapshot(deployment=place.deployment, instance=place.instance, role=place.role,
                         ep_size=place.ep_size, slots_per_rank=place.slots_per_rank, gpus_per_node=place.gpus_per_node,
                         model=model, window_start=window_start, window_seconds=window_seconds,
                         expert_tokens=Array.from_numpy(load), slot_tokens=Array.from_numpy(slot_tokens), ranks=rows,
                         adapter_faults=dict(list(faults.items())[:MAX_FAULT_CAUSES]) if faults else None)
