"""Make an applied table valid before improving it: every expert present, no duplicate on a GPU.

An applied table can break the invariants: it may come from the published EPLB (which can put two
replicas of one expert on a GPU), from a model whose experts changed, or from an older topology.
Each fix rewrites one slot; they are counted as moves like any other.
"""

from __future__ import annotations

import numpy as np

from agents.protocol.placement import replica_counts


def invalid_layers(table: np.ndarray, num_experts: int, slots_per_gpu: int) -> np.ndarray:
    """[L] bool: some expert missing or some GPU holding one expert twice. table: [L, S]."""
    per_gpu = np.sort(table.reshape(table.shape[0], -1, slots_per_gpu), axis=2)
    is_dup = (per_gpu[:, :, 1:] == per_gpu[:, :, :-1]).any(axis=(1, 2))
    return (replica_counts(table, num_experts) == 0).any(axis=1) | is_dup


def repair_layer(row: np.ndarray, load: np.ndarray, slots_per_gpu: int, gpus_per_node: int = 1,
                 expert_node: np.ndarray | None = None) -> np.ndarray:
    """Valid copy of one layer's table [S] for load [E] tokens, changing as few slots as it can.

    `expert_node`: [E] node each expert should stay on (-1: anywhere). Freed slots are refilled with
    experts of their own node when one fits, so a group-local table stays local.
    """
    row = row.copy()
    num_experts = len(load)
    num_gpus = len(row) // slots_per_gpu
    slot_gpu = np.arange(len(row)) // slots_per_gpu
    is_on_gpu = np.zeros((num_gpus, num_experts), dtype=bool)
    free = []
    for slot, expert in enumerate(row):
        if is_on_gpu[slot_gpu[slot], expert]:
            free.append(slot)  # the second copy on this GPU
        else:
            is_on_gpu[slot_gpu[slot], expert] = True
    # running replica counts of the row without its freed slots: replica_counts(row) less the copies in
    # `free`, kept in step with every write below
    counts = is_on_gpu.sum(axis=0)
    missing = list(np.flatnonzero(counts == 0))
    while missing:
        expert = missing.pop()
        if not free:
            # take a slot from the expert whose remaining replicas suffer least
            with np.errstate(divide="ignore"):
                rise = np.where(counts >= 2, load / np.maximum(counts - 1, 1), np.inf)
            donor = int(np.argmin(rise))
            is_free = np.zeros(len(row), dtype=bool)
            is_free[free] = True
            free.append(int(np.flatnonzero((row == donor) & ~is_free)[-1]))
            is_on_gpu[slot_gpu[free[-1]], donor] = False
            counts[donor] -= 1
        slot = free.pop()
        row[slot], counts[expert] = expert, 1
        is_on_gpu[slot_gpu[slot], expert] = True
    for slot in free:
        # a freed slot becomes one more replica of the hottest expert absent from its GPU
        per_replica = np.where(is_on_gpu[slot_gpu[slot]], -2.0, load / (counts + 1))
        if expert_node is not None:
            is_elsewhere = (expert_node >= 0) & (expert_node != slot_gpu[slot] // gpus_per_node)
            per_replica = np.where(is_elsewhere & (per_replica > -2.0), -1.0, per_replica)
        expert = int(np.argmax(per_replica))
        row[slot] = expert
        counts[expert] += 1
        is_on_gpu[slot_gpu[slot], expert] = True
    return row
