"""From-scratch tables: replicate and pack (globally, or inside each node for group locality), then polish.

Layers are independent here, so solving a subset of layers gives exactly those rows of the full solve;
the migration-aware path relies on that to compare a layer's repaired table with a fresh one.
Shapes: L layers, E experts, S slots, G groups.
"""

from __future__ import annotations

import numpy as np

from controlplane.solve.placement.local_search import Search, improve
from controlplane.solve.placement.locality import Locality, balance_groups, expert_node_of, solve_local
from controlplane.solve.placement.packing import pack, replicate

FRESH_TOLERANCE = 0.001  # a fresh solve moves nothing, so it polishes until 0.1% of perfect
# a fresh table starts from LPT packing, whose hot GPU is almost always fixed by a swap with one of the
# two lightest GPUs; a narrower neighbourhood than the migration-aware search keeps the ~20 rounds cheap
NUM_PARTNER_GPUS, NUM_SPARES = 2, 8


def solve_fresh(load: np.ndarray, topology, is_local: bool, tolerance: float = FRESH_TOLERANCE) -> np.ndarray:
    """[L, S] table for load [L, E] tokens; with is_local each group's replicas stay on one node."""
    k, gpn = topology.slots_per_gpu, topology.gpus_per_node
    expert_node = None
    if is_local:
        group_to_node = balance_groups(load, topology.num_groups, topology.num_nodes)
        table = solve_local(load, group_to_node, topology.num_nodes, gpn, k)
        expert_node = expert_node_of(group_to_node, load.shape[1])
    else:
        table = pack(load, replicate(load, topology.num_slots, topology.num_gpus), topology.num_gpus, k)
    return improve(table, load, k, locality=None if expert_node is None else Locality(expert_node, gpn),
                   search=Search(num_partner_gpus=NUM_PARTNER_GPUS, num_spares=NUM_SPARES, tolerance=tolerance))
