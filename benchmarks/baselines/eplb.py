"""The published DeepSeek EPLB greedy (deepseek-ai/EPLB, `eplb.py`), re-implemented in NumPy, as a baseline.

Written by us from the algorithm's description: group packing onto nodes, replication inside each node
by highest load per replica, equal-count LPT packing of replicas onto the node's GPUs. It is stateless and
may put two replicas of one expert on one GPU; both are kept on purpose, because the benchmark measures
exactly those weaknesses. `Eplb` puts it behind the controller's `PlacementAlgorithm` interface; the
controller never runs it. Shapes: L layers, E experts, P physical slots, N nodes, D GPUs, G expert groups.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from controlplane.solve.placement.solver import PlacementPlan, plan_of
from controlplane.solve.placement.topology import Topology


def balanced_packing(weight: np.ndarray, num_packs: int) -> tuple[np.ndarray, np.ndarray]:
    """Equal-count LPT: weight [X, n] -> (pack index [X, n], rank inside the pack [X, n]).

    Each pack receives exactly n/num_packs items; heaviest item first into the lightest pack with
    room, ties to the lowest pack index. One item at a time, vectorised over the X rows.
    """
    num_rows, num_items = weight.shape
    per_pack = num_items // num_packs
    if per_pack == 1:
        identity = np.broadcast_to(np.arange(num_items), weight.shape).copy()
        return identity, np.zeros_like(identity)
    rows = np.arange(num_rows)
    order = np.argsort(-weight, axis=1, kind="stable")
    pack_weight = np.zeros((num_rows, num_packs))
    pack_fill = np.zeros((num_rows, num_packs), dtype=np.int64)
    pack_index = np.empty((num_rows, num_items), dtype=np.int64)
    rank_in_pack = np.empty((num_rows, num_items), dtype=np.int64)
    for position in range(num_items):
        item = order[:, position]
        pack = np.where(pack_fill < per_pack, pack_weight, np.inf).argmin(axis=1)
        pack_index[rows, item] = pack
        rank_in_pack[rows, item] = pack_fill[rows, pack]
        pack_fill[rows, pack] += 1
        pack_weight[rows, pack] += weight[rows, item]
    return pack_index, rank_in_pack


def replicate_experts(weight: np.ndarray, num_physical: int) -> tuple[np.ndarray, np.ndarray]:
    """weight [X, n] -> (physical -> logical [X, num_physical], replica count [X, n]).

    Slots 0..n-1 hold one replica each; every extra slot goes to argmax(weight / count).
    """
    num_rows, num_logical = weight.shape
    rows = np.arange(num_rows)
    phy_to_log = np.empty((num_rows, num_physical), dtype=np.int64)
    phy_to_log[:, :num_logical] = np.arange(num_logical)
    count = np.ones((num_rows, num_logical), dtype=np.int64)
    for slot in range(num_logical, num_physical):
        chosen = (weight / count).argmax(axis=1)
        phy_to_log[:, slot] = chosen
        count[rows, chosen] += 1
    return phy_to_log, count


def _inverse(permutation: np.ndarray) -> np.ndarray:
    inverse = np.empty_like(permutation)
    np.put_along_axis(inverse, permutation, np.arange(permutation.shape[1])[None, :], axis=1)
    return inverse


def rebalance_hierarchical(weight: np.ndarray, num_physical: int, num_groups: int, num_nodes: int,
                           num_gpus: int) -> np.ndarray:
    """weight [L, E] -> slot_to_expert [L, P]; each node gets G/N whole groups and P/N slots."""
    num_layers, num_logical = weight.shape
    group_size = num_logical // num_groups
    groups_per_node = num_groups // num_nodes
    slots_per_node = num_physical // num_nodes
    gpus_per_node = num_gpus // num_nodes
    experts_per_node = num_logical // num_nodes

    # Step 1: pack groups onto nodes, then renumber experts node-major ("mlog" ids)
    group_weight = weight.reshape(num_layers, num_groups, group_size).sum(axis=2)
    group_pack, group_rank = balanced_packing(group_weight, num_nodes)
    group_to_block = group_pack * groups_per_node + group_rank
    log_to_mlog = ((group_to_block * group_size)[:, :, None] + np.arange(group_size)).reshape(num_layers, -1)
    mlog_to_log = _inverse(log_to_mlog)

    # Step 2: replicate inside each node with the node's fixed slot budget
    mlog_weight = np.take_along_axis(weight, mlog_to_log, axis=1).reshape(-1, experts_per_node)
    phy_to_mlog, mlog_count = replicate_experts(mlog_weight, slots_per_node)

    # Step 3: pack the node's replicas onto its GPUs by load per replica
    replica_weight = np.take_along_axis(mlog_weight / mlog_count, phy_to_mlog, axis=1)
    gpu, rank = balanced_packing(replica_weight, gpus_per_node)
    phy_to_packed = gpu * (slots_per_node // gpus_per_node) + rank
    packed_to_mlog = np.take_along_axis(phy_to_mlog, _inverse(phy_to_packed), axis=1)

    # Back to global slot order and original expert ids
    node_offset = (np.arange(num_nodes) * experts_per_node)[None, :, None]
    packed_to_mlog = (packed_to_mlog.reshape(num_layers, num_nodes, -1) + node_offset).reshape(num_layers, -1)
    return np.take_along_axis(mlog_to_log, packed_to_mlog, axis=1)


def rebalance_experts(weight: np.ndarray, num_physical: int, num_groups: int, num_nodes: int,
                      num_gpus: int) -> np.ndarray:
    """EPLB entry point: hierarchical when groups split evenly over nodes, otherwise global."""
    weight = np.asarray(weight, dtype=np.float64)
    if num_groups % num_nodes == 0:
        return rebalance_hierarchical(weight, num_physical, num_groups, num_nodes, num_gpus)
    return rebalance_hierarchical(weight, num_physical, 1, 1, num_gpus)


@dataclass(frozen=True)
class Eplb:
    """EPLB as a `PlacementAlgorithm` (controlplane/solve/placement/algorithm.py). Stateless: it solves from scratch
    whatever `current` is and ignores `max_moved_slots` (the plan still counts the slots it moves against
    `current`); traffic splits evenly over replicas; hierarchical (group-local) when asked and the groups
    split evenly over nodes, as the published code decides."""

    name: str = "EPLB"

    def solve(self, load: np.ndarray, topology: Topology, current: np.ndarray | None = None,
              max_moved_slots: int | None = None, *, group_locality: bool = False) -> PlacementPlan:
        is_local = group_locality and topology.num_groups % topology.num_nodes == 0
        table = rebalance_experts(load, topology.num_slots, topology.num_groups if is_local else 1,
                                  topology.num_nodes if is_local else 1, topology.num_gpus)
        return plan_of(table, None, np.asarray(load, dtype=np.float64), topology, current,
                       is_group_local=is_local)
