"""Group locality: keep each router group's experts (all their replicas) on one node.

With group-limited routing a token visits at most `topk_group` groups; if each group lives on one
node, it crosses at most that many nodes. The price is balance: a hot group cannot borrow slots
from other nodes. Like the published hierarchical EPLB, each node gets num_groups/num_nodes groups;
unlike it, replicas are then packed and improved by local search inside the node.
Shapes: L layers, E experts, G groups (E/G consecutive experts each), N nodes, S slots.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from controlplane.solve.placement.packing import pack, replicate


@dataclass(frozen=True)
class Locality:
    """Where group locality lets a layer's experts go: expert_node [L, E] the node each must stay on (-1:
    anywhere), nodes of `gpus_per_node` GPUs each."""

    expert_node: np.ndarray
    gpus_per_node: int

    def of_layers(self, layers: np.ndarray) -> Locality:
        return Locality(self.expert_node[layers], self.gpus_per_node)


def is_feasible(num_experts: int, num_slots: int, num_groups: int, num_nodes: int,
                gpus_per_node: int) -> bool:
    """True when groups split evenly over nodes and each node's slots fit its experts."""
    if num_experts % num_groups or num_groups % num_nodes:
        return False
    experts_per_node, slots_per_node = num_experts // num_nodes, num_slots // num_nodes
    return experts_per_node <= slots_per_node <= experts_per_node * gpus_per_node


def balance_groups(load: np.ndarray, num_groups: int, num_nodes: int) -> np.ndarray:
    """group_to_node [L, G]: equal group counts per node, node loads as even as swaps make them."""
    num_layers = load.shape[0]
    group_load = load.reshape(num_layers, num_groups, -1).sum(axis=2)
    per_node = num_groups // num_nodes
    group_to_node = np.empty((num_layers, num_groups), dtype=np.int64)
    for layer in range(num_layers):
        node_load, fill = np.zeros(num_nodes), np.zeros(num_nodes, dtype=np.int64)
        for group in np.argsort(-group_load[layer], kind="stable"):
            node = int(np.argmin(np.where(fill < per_node, node_load, np.inf)))
            group_to_node[layer, group], fill[node] = node, fill[node] + 1
            node_load[node] += group_load[layer, group]
        _swap_groups(group_to_node[layer], group_load[layer], node_load)
    return group_to_node


def _swap_groups(group_to_node: np.ndarray, group_load: np.ndarray, node_load: np.ndarray) -> None:
    """Swap a group of the busiest node with a lighter group elsewhere while that lowers the peak."""
    for _ in range(4 * len(group_load)):
        hot = int(np.argmax(node_load))
        delta = group_load[:, None] - group_load[None, :]  # [hot-side group, other group]
        is_pair = (group_to_node[:, None] == hot) & (group_to_node[None, :] != hot) & (delta > 0)
        new_peak = np.maximum(node_load[hot] - delta, node_load[group_to_node][None, :] + delta)
        new_peak[~is_pair] = np.inf
        out, into = np.unravel_index(np.argmin(new_peak), new_peak.shape)
        if not new_peak[out, into] < node_load[hot] * (1 - 1e-12):
            return
        other = group_to_node[into]
        node_load[hot] -= delta[out, into]
        node_load[other] += delta[out, into]
        group_to_node[out], group_to_node[into] = other, hot


def expert_node_of(group_to_node: np.ndarray, num_experts: int) -> np.ndarray:
    """[L, G] group -> node  to  [L, E] expert -> node (-1 stays -1: no constraint)."""
    return np.repeat(group_to_node, num_experts // group_to_node.shape[1], axis=1)


def group_to_node_of(table: np.ndarray, num_experts: int, num_groups: int, num_nodes: int) -> np.ndarray:
    """[L, G] node holding all of each group's replicas in table [L, S], or -1 if spread."""
    num_layers, num_slots = table.shape
    slot_node = np.arange(num_slots) // (num_slots // num_nodes)
    slot_group = table // (num_experts // num_groups)
    result = np.full((num_layers, num_groups), -1, dtype=np.int64)
    for layer in range(num_layers):
        low = np.full(num_groups, num_nodes)
        high = np.full(num_groups, -1)
        np.minimum.at(low, slot_group[layer], slot_node)
        np.maximum.at(high, slot_group[layer], slot_node)
        result[layer] = np.where(low == high, low, -1)
    return result


def solve_local(load: np.ndarray, group_to_node: np.ndarray, num_nodes: int, gpus_per_node: int,
                slots_per_gpu: int) -> np.ndarray:
    """Fresh table [L, S] with each node's groups replicated and packed inside the node.

    load: [L, E] tokens; group_to_node: [L, G] with exactly G/N groups per node.
    """
    num_layers, num_experts = load.shape
    group_size = num_experts // group_to_node.shape[1]
    # node-major expert order: each node's experts, ascending, as one row per (layer, node)
    order = np.argsort(np.repeat(group_to_node, group_size, axis=1), axis=1, kind="stable")
    node_experts = order.reshape(num_layers * num_nodes, -1)
    node_load = np.take_along_axis(load, order, axis=1).reshape(num_layers * num_nodes, -1)
    counts = replicate(node_load, gpus_per_node * slots_per_gpu, gpus_per_node)
    local = pack(node_load, counts, gpus_per_node, slots_per_gpu)
    return np.take_along_axis(node_experts, local, axis=1).reshape(num_layers, -1)


def mean_nodes_per_group(table: np.ndarray, num_experts: int, num_groups: int, num_nodes: int) -> float:
    """Locality cost: nodes a group's replicas span, averaged over layers and groups (1.0 = local)."""
    num_layers, num_slots = table.shape
    slot_node = np.arange(num_slots) // (num_slots // num_nodes)
    is_on_node = np.zeros((num_layers, num_groups, num_nodes), dtype=bool)
    # expert e belongs to group e*G//E, which is e // (E/G) whenever groups are equal-sized
    is_on_node[np.arange(num_layers)[:, None], table * num_groups // num_experts, slot_node] = True
    return float(is_on_node.sum(axis=2).mean())
