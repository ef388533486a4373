"""Relabel a table's GPUs (and slots within each GPU) to keep as much of an applied table as possible.

GPUs are interchangeable to the balance: permuting which physical GPU gets which set of experts changes
no load, only the weights to transfer. Each new GPU is matched to the applied GPU it shares most experts
with (an assignment problem, solved exactly by scipy's Hungarian method). Each shared expert then goes
back in its old slot, so the moved slots are exactly the sum over GPUs of (k - overlap). With group
locality nodes are matched first and GPUs only within matched nodes, so the relabelled table stays local.
Shapes: L layers, S slots, G GPUs, N nodes, k slots per GPU, E experts.
"""

from __future__ import annotations

import numpy as np
from scipy.optimize import linear_sum_assignment


def relabel(table: np.ndarray, current: np.ndarray, slots_per_gpu: int, gpus_per_node: int,
            is_node_bound: bool, num_experts: int) -> np.ndarray:
    """Equivalent copy of table [L, S] (same expert set per GPU, GPUs permuted) closest to current [L, S]."""
    num_layers, num_slots = table.shape
    k = slots_per_gpu
    num_gpus = num_slots // k
    overlap = _overlap(table, current, num_gpus, num_experts)  # [L, G new, G applied]
    gpu_to_gpu = np.empty((num_layers, num_gpus), dtype=np.int64)  # new GPU -> applied GPU it becomes
    for layer in range(num_layers):
        gpu_to_gpu[layer] = _assign(overlap[layer], gpus_per_node if is_node_bound else num_gpus)
    by_gpu = np.empty((num_layers, num_gpus, k), dtype=table.dtype)
    by_gpu[np.arange(num_layers)[:, None], gpu_to_gpu] = table.reshape(num_layers, num_gpus, k)
    return _align_slots(by_gpu, current.reshape(num_layers, num_gpus, k)).reshape(num_layers, num_slots)


def _overlap(table, current, num_gpus, num_experts) -> np.ndarray:
    """[L, G, G] float32: experts GPU i of table shares with GPU j of current."""
    num_layers, num_slots = table.shape
    if num_slots == num_gpus:
        # one slot per GPU: a comparison (L*G*G) instead of the one-hot product's L*G*E*G multiply-adds,
        # which took 0.1-0.2 s at EP320
        return (table[:, :, None] == current[:, None, :]).astype(np.float32)
    gpu = np.broadcast_to(np.arange(num_slots) // (num_slots // num_gpus), table.shape)
    rows = np.broadcast_to(np.arange(num_layers)[:, None], table.shape)
    new, old = (np.zeros((num_layers, num_gpus, num_experts), dtype=np.float32) for _ in range(2))
    new[rows, gpu, table] = 1.0
    old[rows, gpu, current] = 1.0
    return new @ np.swapaxes(old, 1, 2)


def _assign(overlap: np.ndarray, gpus_per_block: int) -> np.ndarray:
    """[G, G] overlap -> [G] applied GPU for each new GPU; blocks of gpus_per_block map onto whole blocks."""
    num_gpus = overlap.shape[0]
    num_blocks = num_gpus // gpus_per_block
    block_overlap = overlap.reshape(num_blocks, gpus_per_block, num_blocks, gpus_per_block).sum(axis=(1, 3))
    _, block_to_block = linear_sum_assignment(block_overlap, maximize=True)
    result = np.empty(num_gpus, dtype=np.int64)
    for block, target in enumerate(block_to_block):
        new, old = slice(block * gpus_per_block, (block + 1) * gpus_per_block), \
            slice(target * gpus_per_block, (target + 1) * gpus_per_block)
        _, inner = linear_sum_assignment(overlap[new, old], maximize=True)
        result[new] = target * gpus_per_block + inner
    return result


def _align_slots(new: np.ndarray, old: np.ndarray) -> np.ndarray:
    """[L, G, k] each GPU's new experts, shared ones in their old slot, the rest in the freed slots in order."""
    k = new.shape[2]
    earlier = np.tril(np.ones((k, k), dtype=bool), -1)
    # an invalid applied table may hold an expert twice on a GPU: only its first slot may keep it
    is_repeat = ((old[..., :, None] == old[..., None, :]) & earlier).any(axis=-1)
    match = old[..., :, None] == new[..., None, :]                 # [L, G, k old, k new]
    is_kept = match.any(axis=-1) & ~is_repeat
    is_placed = (match & ~is_repeat[..., :, None]).any(axis=-2)
    free_first = np.argsort(is_kept, axis=-1, kind="stable")      # freed slots first
    missing_first = np.take_along_axis(new, np.argsort(is_placed, axis=-1, kind="stable"), axis=-1)
    num_missing = (~is_placed).sum(axis=-1, keepdims=True)
    values = np.where(np.arange(k) < num_missing, missing_first, np.take_along_axis(old, free_first, axis=-1))
    result = old.copy()
    np.put_along_axis(result, free_first, values, axis=-1)
    return result
