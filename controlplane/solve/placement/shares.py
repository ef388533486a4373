"""Uneven traffic split across an expert's replicas (slot_share), by water-filling.

An even split leaves GPUs uneven whenever a replicated expert shares GPUs of different loads. Letting a
replica on a light GPU take more of its expert's tokens fixes that for free (no weights move). It also
recovers what the published EPLB gets by putting two copies of an expert on one GPU, without the copy.
Each step water-fills one expert's tokens over its GPUs (lowest level first), which minimises the
largest of those GPUs' loads and touches no other GPU, so the layer's maximum never rises; sweeps
repeat over the replicated experts, hottest first. Every replica keeps at least `min_share` of an even
split, so no slot the plan keeps is left idle (a replica worth nothing should be dropped, not starved).
Shapes: L layers, S slots, E experts, G GPUs, k slots per GPU, R replicated experts, C replicas.
"""

from __future__ import annotations

import numpy as np

from agents.protocol.placement import even_share, gpu_load, replica_counts, slot_load

MIN_SHARE = 0.1  # of an even split: floors each replica at 10% of 1/replicas


def water_fill(table: np.ndarray, load: np.ndarray, slots_per_gpu: int, num_sweeps: int = 4,
               min_share: float = MIN_SHARE) -> np.ndarray:
    """[L, S] share of its expert's tokens each slot takes; per layer and expert the shares sum to 1.

    table: [L, S] slot -> expert; load: [L, E] tokens.
    """
    num_layers, num_slots = table.shape
    counts = replica_counts(table, load.shape[1])
    share = even_share(table, counts)
    replica_slots = _replica_slots(table, load, counts)               # [L, R, C], -1 padded
    if replica_slots.size == 0:
        return share
    slot_gpu = np.arange(num_slots) // slots_per_gpu
    # kept in step with `share` by every fill below: gpu_tokens == gpu_load(slot_load(table, load, share), G)
    gpu_tokens = gpu_load(slot_load(table, load, share), num_slots // slots_per_gpu)
    # each rank's step touches only the layers that have an expert of that rank and that expert's replicas
    # (colder ranks have fewer): padding changes nothing, so it is left out
    num_real = (replica_slots >= 0).sum(axis=2)                       # [L, R]
    rank_layers = [np.flatnonzero(num_real[:, rank]) for rank in range(replica_slots.shape[1])]
    # per-layer convergence, so a layer's shares never depend on which other layers are solved with it
    is_active = np.ones(num_layers, dtype=bool)
    for _ in range(num_sweeps):
        previous = gpu_tokens.max(axis=1)
        for rank, layers in enumerate(rank_layers):
            layers = layers[is_active[layers]]
            if len(layers) == 0:
                continue
            rows = layers[:, None]
            slots = replica_slots[layers, rank, :num_real[layers, rank].max()]  # [l, C]
            is_real = slots >= 0
            safe = np.where(is_real, slots, 0)
            gpus = slot_gpu[safe]
            tokens = load[rows, table[rows, safe][:, :1]][:, 0]       # [l] the expert's tokens
            count = is_real.sum(axis=1)
            floor = min_share / np.maximum(count, 1) * tokens         # [l]
            old = np.where(is_real, share[rows, safe] * tokens[:, None], 0.0)
            base = np.where(is_real, gpu_tokens[rows, gpus] - old + floor[:, None], np.inf)
            new = floor[:, None] + _fill(base, tokens * (1.0 - min_share))
            is_step = is_real & (tokens[:, None] > 0)
            new = np.where(is_step, new, old)
            layer_of = np.broadcast_to(rows, gpus.shape)[is_step]
            np.add.at(gpu_tokens, (layer_of, gpus[is_step]), (new - old)[is_step])
            share[layer_of, slots[is_step]] = (new / np.where(tokens > 0, tokens, 1.0)[:, None])[is_step]
        is_active &= gpu_tokens.max(axis=1) < previous * (1 - 1e-6)
        if not is_active.any():
            break
    return share


def _replica_slots(table: np.ndarray, load: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """[L, R, C] slots of each layer's replicated experts, hottest expert first (ties: lower id), each
    expert's slots ascending; -1 pads."""
    num_layers, num_slots = table.shape
    is_replicated = counts >= 2                                          # [L, E]
    num_replicated = is_replicated.sum(axis=1)
    num_ranks, num_replicas = int(num_replicated.max(initial=0)), int(counts.max(initial=0))
    result = np.full((num_layers, num_ranks, num_replicas if num_ranks else 0), -1, dtype=np.int64)
    if num_ranks == 0:
        return result
    rows = np.arange(num_layers)[:, None]
    expert_order = np.argsort(np.where(is_replicated, -load, np.inf), axis=1, kind="stable")
    expert_rank = np.empty_like(expert_order)
    expert_rank[rows, expert_order] = np.arange(load.shape[1])
    slot_rank = np.where(is_replicated[rows, table], expert_rank[rows, table], num_ranks)  # [L, S]
    # slots grouped by rank, ascending inside a group; a slot's place in its group is its replica index
    by_rank = np.argsort(slot_rank, axis=1, kind="stable")
    sorted_rank = np.take_along_axis(slot_rank, by_rank, axis=1)
    first = np.argmax(sorted_rank[:, :, None] == np.arange(num_ranks), axis=1)  # [L, R] first position
    is_real = sorted_rank < num_ranks
    place = np.arange(num_slots) - np.take_along_axis(first, np.minimum(sorted_rank, num_ranks - 1), axis=1)
    layer_of = np.broadcast_to(rows, table.shape)
    result[layer_of[is_real], sorted_rank[is_real], place[is_real]] = by_rank[is_real]
    return result


def _fill(base: np.ndarray, water: np.ndarray) -> np.ndarray:
    """Water-filling: [L, C] levels (inf = absent) and [L] amounts -> [L, C] amounts raising the lowest."""
    order = np.argsort(base, axis=1, kind="stable")
    level_sorted = np.take_along_axis(base, order, axis=1)
    with np.errstate(invalid="ignore"):
        cumulative = np.cumsum(level_sorted, axis=1)
        candidate = (water[:, None] + cumulative) / np.arange(1, base.shape[1] + 1)
    # the level covers the m lowest GPUs where m is the last index whose candidate level exceeds it
    is_covered = candidate > level_sorted
    num_covered = np.maximum(is_covered.sum(axis=1), 1)
    level = np.take_along_axis(candidate, (num_covered - 1)[:, None], axis=1)
    with np.errstate(invalid="ignore"):
        return np.maximum(level - base, 0.0)
