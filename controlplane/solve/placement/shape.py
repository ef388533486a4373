"""What other pool shapes would reach on a measured load: for each number of slots per GPU, the floor no
placement gets under (`packing.imbalance_floor`) and what the controller's own fresh solve reaches (a placement
that exists). Redundant experts are sized from the pool's own load instead of a rule of thumb; `moectl slots`
prints it. Pure.

Both are of one load, solved for it: a loop that follows a drifting load holds a few points above the solve
(docs/decisions/2026-12-02-imbalance-floor.md). Global placements: group locality, where a policy asks for
it, can only add to them.
Shapes: L layers, E experts, G GPUs, k slots per GPU.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from controlplane.solve.placement.packing import imbalance_floor
from controlplane.solve.placement.solver import solve_placement
from controlplane.solve.placement.topology import Topology


@dataclass(frozen=True)
class ShapeOption:
    slots_per_gpu: int
    num_redundant: int  # slots beyond one per expert, over the whole EP group
    floor: float | None  # no placement gets under it; None: the load is empty
    reached: float | None  # the controller's fresh solve of this load


def shape_options(load: np.ndarray, num_gpus: int, max_slots_per_gpu: int) -> list[ShapeOption]:
    """load: [L, E] tokens per expert; one option per slots per GPU, from the fewest that give every expert a
    slot up to max_slots_per_gpu (the fewest alone where that is below them)."""
    load = np.asarray(load, dtype=np.float64)
    num_experts = load.shape[1]
    lowest = max(1, math.ceil(num_experts / num_gpus))
    options = []
    for k in range(lowest, max(max_slots_per_gpu, lowest) + 1):
        # a global solve never reads the nodes: one node of all the GPUs
        topology = Topology(num_nodes=1, gpus_per_node=num_gpus, slots_per_gpu=k)
        options.append(ShapeOption(k, k * num_gpus - num_experts, imbalance_floor(load, topology.num_slots, num_gpus),
                                   solve_placement(load, topology).imbalance))
    return options
