"""Migration-aware solve: start from the applied table, move only what pays, within a moves budget.

Steps, cheapest first: repair invariants the applied table breaks; (with group locality) relocate
layers that are not local while the budget lasts; local search (swap, retarget, chain moves); uneven
slot shares, which move no weights. Local search can still end in a local optimum a fresh solve
escapes, so for every layer left above tolerance a fresh solve is relabelled to match the applied
table (GPU assignment, see `relabel`) and adopted where it is better and the budget allows: when it
gains at least `min_gain_per_move` per extra moved slot, or when the repaired layer is more than
MAX_RATIO_TO_FRESH times worse (the promise: with budget, never far behind a fresh solve).
Shapes: L layers, E experts, S slots, G groups, N nodes.
"""

from __future__ import annotations

import numpy as np

from controlplane.solve.construct import FRESH_TOLERANCE, solve_fresh
from controlplane.solve.local_search import counts_of, improve
from controlplane.solve.locality import balance_groups, expert_node_of, group_to_node_of, solve_local
from controlplane.solve.relabel import relabel
from controlplane.solve.repair import invalid_layers, repair_layer
from controlplane.solve.shares import water_fill

MAX_RATIO_TO_FRESH = 1.02


def solve_incremental(load: np.ndarray, topology, current: np.ndarray, max_moved_slots: int | None,
                      is_local: bool, tolerance: float, min_gain_per_move: float) -> tuple[np.ndarray, np.ndarray]:
    """(table [L, S], slot_share [L, S]) for load [L, E] tokens, starting from current [L, S]."""
    num_experts, k, gpn = load.shape[1], topology.slots_per_gpu, topology.gpus_per_node
    table = current.copy()
    home = None
    if is_local:
        home = expert_node_of(group_to_node_of(current, num_experts, topology.num_groups, topology.num_nodes),
                              num_experts)
    for layer in np.flatnonzero(invalid_layers(current, num_experts, k)):
        table[layer] = repair_layer(current[layer], load[layer], k, gpn, None if home is None else home[layer])
    expert_node = None
    if is_local:
        expert_node = expert_node_of(_relocate(table, current, load, topology, max_moved_slots), num_experts)
    table = improve(table, load, counts_of(table, num_experts), k, current=current,
                    max_moved_slots=max_moved_slots, expert_node=expert_node, gpus_per_node=gpn,
                    min_gain=min_gain_per_move, tolerance=tolerance)
    share = water_fill(table, load, k)
    _adopt_fresh(table, share, load, topology, current, max_moved_slots, is_local, tolerance, min_gain_per_move)
    return table, share


def layer_ratio(table: np.ndarray, share: np.ndarray, load: np.ndarray, slots_per_gpu: int) -> np.ndarray:
    """[L] max/mean GPU load per layer (1.0 for a layer without load)."""
    num_layers, num_slots = table.shape
    gpu_load = (np.take_along_axis(load, table, axis=1) * share).reshape(num_layers, -1, slots_per_gpu).sum(axis=2)
    mean = gpu_load.mean(axis=1)
    return np.divide(gpu_load.max(axis=1), mean, out=np.ones_like(mean), where=mean > 0)


def _adopt_fresh(table, share, load, topology, current, max_moved_slots, is_local, tolerance, min_gain) -> None:
    """Replace layers of table/share (in place) by relabelled fresh solves where that pays (module doc)."""
    k = topology.slots_per_gpu
    budget = np.inf if max_moved_slots is None else max_moved_slots - int((table != current).sum())
    ratio = layer_ratio(table, share, load, k)
    layers = np.flatnonzero(ratio > 1.0 + tolerance)
    if len(layers) == 0:
        return
    fresh = relabel(solve_fresh(load[layers], topology, is_local, FRESH_TOLERANCE), current[layers], k,
                    topology.gpus_per_node, is_local, load.shape[1])
    fresh_share = water_fill(fresh, load[layers], k)
    fresh_ratio = layer_ratio(fresh, fresh_share, load[layers], k)
    gain = ratio[layers] - fresh_ratio
    extra = (fresh != current[layers]).sum(axis=1) - (table[layers] != current[layers]).sum(axis=1)
    is_worth = (gain > 1e-12) & ((gain >= min_gain * np.maximum(extra, 0))
                                 | (ratio[layers] > MAX_RATIO_TO_FRESH * fresh_ratio))
    for index in np.argsort(-gain / np.maximum(extra, 0.5), kind="stable"):
        if is_worth[index] and extra[index] <= budget:
            table[layers[index]], share[layers[index]] = fresh[index], fresh_share[index]
            budget -= extra[index]


def _relocate(table, current, load, topology, max_moved_slots) -> np.ndarray:
    """Make spread layers group-local while the budget lasts (mutates table); -> group_to_node [L, G]."""
    groups, nodes = topology.num_groups, topology.num_nodes
    group_to_node = group_to_node_of(table, load.shape[1], groups, nodes)
    budget = np.inf if max_moved_slots is None else max_moved_slots - int((table != current).sum())
    for layer in np.flatnonzero((group_to_node < 0).any(axis=1)):
        fresh_map = balance_groups(load[layer:layer + 1], groups, nodes)
        fresh = relabel(solve_local(load[layer:layer + 1], fresh_map, nodes, topology.gpus_per_node,
                                    topology.slots_per_gpu), current[layer:layer + 1], topology.slots_per_gpu,
                        topology.gpus_per_node, True, load.shape[1])[0]
        # relabelling permutes nodes, so the groups' nodes are read back from the table
        fresh_map = group_to_node_of(fresh[None], load.shape[1], groups, nodes)
        cost = int((fresh != current[layer]).sum()) - int((table[layer] != current[layer]).sum())
        if cost <= budget:
            table[layer], group_to_node[layer] = fresh, fresh_map[0]
            budget -= cost
    return group_to_node
