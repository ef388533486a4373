"""Migration-aware solve: start from the applied table, move only what pays, within a moves budget.

Steps, cheapest first: repair invariants the applied table breaks; (with group locality) relocate
layers that are not local while the budget lasts; local search (swap, retarget, chain moves); uneven
slot shares, which move no weights. Local search can still end in a local optimum a fresh solve
escapes. So for every layer left above tolerance, a fresh solve is relabelled to match the applied
table (GPU assignment, see `relabel`) and adopted, best gain per extra moved slot first, while the
budget allows. First come every layer that gains at least `min_gain_per_move` per extra moved slot, then
more layers until the plan's mean imbalance is within MAX_RATIO_TO_FRESH of fresh solves'. The promise:
with budget, never far behind a fresh solve, without paying a whole re-solve for every layer.
A layer at its ratio bound (`packing.ratio_bound`: no table does better) is treated as within tolerance by
every step: no search, no fresh solve. At one slot per GPU (the decode pool) nearly every layer reaches it
after one stage of search, and the fresh solves and relabelling they skip were most of the solve.
Shapes: L layers, E experts, S slots, G groups, N nodes.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from agents.protocol.placement import gpu_load, layer_imbalance, slot_load
from controlplane.solve.placement.construct import FRESH_TOLERANCE, solve_fresh
from controlplane.solve.placement.local_search import Search, improve
from controlplane.solve.placement.locality import (
    Locality,
    balance_groups,
    expert_node_of,
    group_to_node_of,
    solve_local,
)
from controlplane.solve.placement.packing import ratio_bound
from controlplane.solve.placement.relabel import relabel
from controlplane.solve.placement.repair import invalid_layers, repair_layer
from controlplane.solve.placement.shares import water_fill
from controlplane.solve.placement.topology import Topology

MAX_RATIO_TO_FRESH = 1.01  # mean over layers; promised: 1.02 of a fresh plan, the rest is room for forecast error
STAGE_ROUNDS = 4  # first stage of local search; each later stage doubles
BOUND_SLACK = 1e-9  # relative: a layer this close to its ratio bound is at it (float rounding)


@dataclass(frozen=True)
class _Migration:
    """What every step of one incremental solve reads: the load, the layout, the applied table, how far from it
    the solve may go, and what a layer's move must pay."""

    load: np.ndarray  # [L, E] tokens
    topology: Topology
    current: np.ndarray  # [L, S] the applied table
    max_moved_slots: int | None  # slots that may differ from `current`; None: any
    tolerance: float  # a layer within 1 + tolerance of an even split is done
    min_gain: float  # per extra moved slot, as a fraction of the layer's mean GPU load
    bound: np.ndarray  # [L] each layer's ratio bound (`packing.ratio_bound`)

    def budget_left(self, table: np.ndarray) -> float:
        """Slots `table` may still move away from `current` (inf: no budget)."""
        return np.inf if self.max_moved_slots is None else self.max_moved_slots - int((table != self.current).sum())


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
    migration = _Migration(load, topology, current, max_moved_slots, tolerance, min_gain_per_move,
                           ratio_bound(load, topology.num_slots, topology.num_gpus))
    locality = None
    if is_local:
        locality = Locality(expert_node_of(_relocate(table, migration), num_experts), topology.gpus_per_node)
    share = _improve_in_stages(table, migration, locality)
    _adopt_fresh(table, share, migration, is_local)
    return table, share


def _improve_in_stages(table: np.ndarray, migration: _Migration, locality: Locality | None) -> np.ndarray:
    """Local search in stages of doubling length (mutates table); -> slot_share [L, S].

    Uneven shares balance for free what the search would buy with moves, so after each stage the shares
    are recomputed and a layer they bring within tolerance stops moving weights.
    """
    load, current, k = migration.load, migration.current, migration.topology.slots_per_gpu
    share = water_fill(table, load, k)
    is_open = _is_open(layer_ratio(table, share, load, k), migration.bound, migration.tolerance)
    num_rounds = STAGE_ROUNDS
    while is_open.any():
        layers = np.flatnonzero(is_open)
        before = table[layers]
        budget = None
        if migration.max_moved_slots is not None:
            budget = migration.budget_left(table) + int((before != current[layers]).sum())
        after = improve(before, load[layers], k, current=current[layers], max_moved_slots=budget,
                        locality=None if locality is None else locality.of_layers(layers),
                        search=Search(max_rounds=num_rounds, min_gain=migration.min_gain,
                                      tolerance=migration.tolerance))
        table[layers] = after
        # shares are per layer, so only the layers the stage changed need new ones; the others close
        is_changed = (after != before).any(axis=1)
        layers, after = layers[is_changed], after[is_changed]
        share[layers] = water_fill(after, load[layers], k)
        is_open[:] = False
        is_open[layers] = _is_open(layer_ratio(after, share[layers], load[layers], k), migration.bound[layers],
                                   migration.tolerance)
        num_rounds *= 2
    return share


def _is_open(ratio: np.ndarray, bound: np.ndarray, tolerance: float) -> np.ndarray:
    """[L] layers worth more moves: above tolerance and above their ratio bound (NaN: neither)."""
    return (ratio > 1.0 + tolerance) & (ratio > bound * (1.0 + BOUND_SLACK))


def layer_ratio(table: np.ndarray, share: np.ndarray, load: np.ndarray, slots_per_gpu: int) -> np.ndarray:
    """[L] max/mean GPU load per layer; NaN for a layer without load, which compares false against any
    tolerance, so such a layer is never opened for moves."""
    return layer_imbalance(gpu_load(slot_load(table, load, share), table.shape[1] // slots_per_gpu))


def _adopt_fresh(table: np.ndarray, share: np.ndarray, migration: _Migration, is_local: bool) -> None:
    """Replace layers of table/share (in place) by relabelled fresh solves where that pays (module doc)."""
    load, current, topology, bound = migration.load, migration.current, migration.topology, migration.bound
    k, tolerance, min_gain = topology.slots_per_gpu, migration.tolerance, migration.min_gain
    budget = migration.budget_left(table)
    ratio = layer_ratio(table, share, load, k)
    layers = np.flatnonzero(_is_open(ratio, bound, tolerance))
    if len(layers) == 0:
        return
    fresh = relabel(solve_fresh(load[layers], topology, is_local, FRESH_TOLERANCE), current[layers], k,
                    topology.gpus_per_node, is_local, load.shape[1])
    fresh_share = water_fill(fresh, load[layers], k)
    fresh_ratio = layer_ratio(fresh, fresh_share, load[layers], k)
    gain = ratio[layers] - fresh_ratio
    extra = (fresh != current[layers]).sum(axis=1) - (table[layers] != current[layers]).sum(axis=1)
    order = np.argsort(-gain / np.maximum(extra, 0.5), kind="stable")
    is_taken = np.zeros(len(layers), dtype=bool)
    # a loaded layer left out is within tolerance, so at most 1+tolerance times its own fresh solve (>= 1), or
    # at its bound, which its fresh solve cannot beat (and reaches at one slot per GPU); layers without load
    # (NaN) are no part of the plan's imbalance, so none of the sums
    is_loaded = ~np.isnan(ratio)
    is_left_out = is_loaded.copy()
    is_left_out[layers] = False
    fresh_floor = np.where(ratio > 1.0 + tolerance, bound, 1.0)
    target = MAX_RATIO_TO_FRESH * (fresh_ratio.sum() + fresh_floor[is_left_out].sum())
    total = ratio[is_loaded].sum()
    for must_pay in (True, False):
        for index in order:
            if is_taken[index] or gain[index] <= 1e-12 or extra[index] > budget:
                continue
            if must_pay and gain[index] < min_gain * max(extra[index], 0):
                continue
            if not must_pay and total <= target:
                break
            is_taken[index] = True
            budget -= extra[index]
            total -= gain[index]
    table[layers[is_taken]], share[layers[is_taken]] = fresh[is_taken], fresh_share[is_taken]


def _relocate(table: np.ndarray, migration: _Migration) -> np.ndarray:
    """Make spread layers group-local while the budget lasts (mutates table); -> group_to_node [L, G].

    Layers are independent, so every spread layer's local table is solved in one batch; the budget is then
    spent layer by layer in ascending order.
    """
    load, current, topology = migration.load, migration.current, migration.topology
    groups, nodes, num_experts = topology.num_groups, topology.num_nodes, load.shape[1]
    group_to_node = group_to_node_of(table, num_experts, groups, nodes)
    budget = migration.budget_left(table)
    layers = np.flatnonzero((group_to_node < 0).any(axis=1))
    if len(layers) == 0:
        return group_to_node
    fresh = relabel(solve_local(load[layers], balance_groups(load[layers], groups, nodes), nodes,
                                topology.gpus_per_node, topology.slots_per_gpu), current[layers],
                    topology.slots_per_gpu, topology.gpus_per_node, True, num_experts)
    # relabelling permutes nodes, so the groups' nodes are read back from the table
    fresh_map = group_to_node_of(fresh, num_experts, groups, nodes)
    cost = (fresh != current[layers]).sum(axis=1) - (table[layers] != current[layers]).sum(axis=1)
    for index, layer in enumerate(layers):
        if cost[index] <= budget:
            table[layer], group_to_node[layer] = fresh[index], fresh_map[index]
            budget -= cost[index]
    return group_to_node
