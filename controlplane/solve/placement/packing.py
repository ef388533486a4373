"""From-scratch construction: replicate hot experts, then pack replicas onto GPUs.

Both steps run over all layers at once (one NumPy step per extra slot / per replica), because
layers are independent and a Python loop over 58 layers x 288 slots would cost far more.
Shapes: L = num_layers, E = num_experts, S = num_slots, G = num_gpus, k = slots_per_gpu.
"""

from __future__ import annotations

import numpy as np

from agents.protocol.placement import mean_over_loaded


def replicate(load: np.ndarray, num_slots: int, max_replicas: int) -> np.ndarray:
    """Replica count per expert, minimising the largest per-replica load.

    load: [L, E] tokens. Returns [L, E] int64 counts, each in 1..max_replicas, rows summing to
    num_slots. Greedy apportionment (give the next slot to argmax load/count) is optimal for the
    max per-replica load; the cap keeps the no-two-copies-on-one-GPU rule satisfiable.
    """
    num_layers, num_experts = load.shape
    counts = np.ones((num_layers, num_experts), dtype=np.int64)
    rows = np.arange(num_layers)
    for _ in range(num_slots - num_experts):
        per_replica = load / counts
        # capped experts must never win, even when every load is zero
        per_replica[counts >= max_replicas] = -1.0
        counts[rows, per_replica.argmax(axis=1)] += 1
    return counts


def ratio_bound(load: np.ndarray, num_slots: int, num_gpus: int) -> np.ndarray:
    """[L] lowest max/mean GPU load any table can reach for load [L, E] tokens (NaN for a layer without load).

    Whatever the split over an expert's replicas, one of them takes at least load/replicas, and its GPU at
    least that, so no table beats the best replica counts' largest per-replica load (`replicate`), nor the
    mean. At one slot per GPU a GPU's load is its replica's, and a fresh solve reaches the bound exactly.
    """
    mean = load.sum(axis=1) / num_gpus
    peak = (load / replicate(load, num_slots, num_gpus)).max(axis=1)
    return np.divide(np.maximum(peak, mean), mean, out=np.full(mean.shape, np.nan), where=mean > 0)


def imbalance_floor(load: np.ndarray, num_slots: int, num_gpus: int) -> float | None:
    """The imbalance no table of `num_slots` slots on `num_gpus` GPUs gets under for load [L, E] tokens: the
    mean over loaded layers of `ratio_bound`, in the units of a measured imbalance; None without load.

    Above the policy's threshold it says the pool's shape is the limit, not the loop; only more slots per GPU
    lift it (docs/decisions/2026-12-02-imbalance-floor.md).
    """
    load = np.asarray(load, dtype=np.float64)
    if load.ndim != 2 or load.size == 0:  # a window that carried no expert load
        return None
    return mean_over_loaded(ratio_bound(load, num_slots, num_gpus))


def expert_of_replicas(counts: np.ndarray) -> np.ndarray:
    """[L, E] replica counts -> [L, S] expert id of each replica, experts in ascending order."""
    num_layers, num_experts = counts.shape
    experts = np.arange(num_experts)
    return np.stack([np.repeat(experts, counts[layer]) for layer in range(num_layers)])


def pack(load: np.ndarray, counts: np.ndarray, num_gpus: int, slots_per_gpu: int) -> np.ndarray:
    """Longest-processing-time packing with equal slot counts and no duplicate on one GPU.

    load: [L, E] tokens; counts: [L, E] replicas (rows sum to num_gpus*slots_per_gpu, each
    count <= num_gpus). Returns slot_to_expert [L, S]; GPU g gets slots g*k .. g*k+k-1.
    """
    num_layers, num_experts = load.shape
    rows = np.arange(num_layers)
    replica_expert = expert_of_replicas(counts)
    replica_load = np.take_along_axis(load / counts, replica_expert, axis=1)
    # stable sort keeps one expert's replicas adjacent, so they spread over distinct GPUs
    order = np.argsort(-replica_load, axis=1, kind="stable")
    replica_expert = np.take_along_axis(replica_expert, order, axis=1)
    replica_load = np.take_along_axis(replica_load, order, axis=1)
    if slots_per_gpu == 1:
        # the loop below would give replica r to GPU r (every GPU left is empty, the lowest index wins)
        return replica_expert

    gpu_load = np.zeros((num_layers, num_gpus))
    gpu_fill = np.zeros((num_layers, num_gpus), dtype=np.int64)
    is_on_gpu = np.zeros((num_layers, num_gpus, num_experts), dtype=bool)
    slot_to_expert = np.empty((num_layers, num_gpus * slots_per_gpu), dtype=np.int64)
    for rank in range(replica_expert.shape[1]):
        expert = replica_expert[:, rank]
        is_blocked = (gpu_fill >= slots_per_gpu) | is_on_gpu[rows, :, expert]
        gpu = np.where(is_blocked, np.inf, gpu_load).argmin(axis=1)
        for layer in np.flatnonzero(is_blocked[rows, gpu]):
            gpu[layer] = _make_room(slot_to_expert[layer], gpu_fill[layer], is_on_gpu[layer],
                                    gpu_load[layer], load[layer] / counts[layer], expert[layer],
                                    slots_per_gpu)
        slot = gpu * slots_per_gpu + gpu_fill[rows, gpu]
        slot_to_expert[rows, slot] = expert
        gpu_fill[rows, gpu] += 1
        gpu_load[rows, gpu] += replica_load[:, rank]
        is_on_gpu[rows, gpu, expert] = True
    return slot_to_expert


def _make_room(slot_to_expert, gpu_fill, is_on_gpu, gpu_load, per_replica, expert, slots_per_gpu) -> int:
    """Dead end: every GPU with room already holds `expert`. Move some replica f from a full GPU
    without `expert` onto a GPU with room; that frees a slot for `expert`. Such an f always exists:
    the GPU with room holds fewer than k experts, so it cannot hold all k of a full GPU's experts.
    Mutates the layer's arrays in place and returns the GPU that now has room for `expert`.
    """
    roomy = int(np.flatnonzero(gpu_fill < slots_per_gpu)[0])
    for full in np.flatnonzero(~is_on_gpu[:, expert]):
        for slot in range(full * slots_per_gpu, (full + 1) * slots_per_gpu):
            moved = slot_to_expert[slot]
            if is_on_gpu[roomy, moved]:
                continue
            slot_to_expert[roomy * slots_per_gpu + gpu_fill[roomy]] = moved
            gpu_fill[roomy] += 1
            is_on_gpu[roomy, moved] = True
            gpu_load[roomy] += per_replica[moved]
            # close the hole by moving the GPU's last replica into it
            last = (full + 1) * slots_per_gpu - 1
            slot_to_expert[slot] = slot_to_expert[last]
            gpu_fill[full] -= 1
            is_on_gpu[full, moved] = False
            gpu_load[full] -= per_replica[moved]
            return int(full)
    raise AssertionError("no replica can make room; counts exceed num_gpus")
