"""The dispatch-time split: per step and MoE layer, how many of a replicated expert's tokens each replica takes.

A placement fixes which GPUs hold each expert; its `slot_share` fixes, per window, what fraction of the expert's
tokens each replica gets. The step's own counts are known at dispatch, so the split can instead be chosen per
step to make the busiest GPU as light as it can be (SGLang/DeepSeek LPLB solve this as a small LP per layer).

The problem, per step and layer: GPU g's load is the tokens of every expert it holds that are sent to it; an
expert's tokens must all go to its replica GPUs. Minimise the busiest GPU's load. This is a transportation
problem, and the GPU load vectors it can reach form (a translate of) the base polytope of the coverage function
B -> tokens of experts with a replica in B. On such a polytope the point of least sum of squares is also the one
of least maximum (Fujishige's lexicographically optimal base). So the split here minimises the sum of squared
GPU loads by block coordinate descent. One expert at a time, it water-fills its tokens over its GPUs given every
other load (the integral water-fill, exact for that block). Each block step:

1. Never raises the busiest GPU (it minimises the max over the expert's GPUs and leaves the others alone). So the
   split, started from the fixed shares, is never worse than them on the same counts.
2. Converges, in the fractional limit, to the LP optimum (Gauss-Seidel on a convex quadratic over a product of
   simplices).

In whole tokens a fixed point can stop short of the LP optimum by a token per hop of an exchange path. So the
split comes with a certificate, `split_bound`. For any set B of GPUs, the tokens of experts held only in B must
land in B, so max load >= tokens(B) / |B|. Over B = the k busiest GPUs this is the LP optimum at its limit. The
gap of a split to its bound is measured, not assumed (benchmarks/results/replica-split-*.md).

Shapes: ... leading dims (steps, layers), E logical experts, R the most distinct GPUs any expert is on, G GPUs.
Loads are in tokens (token-expert assignments). `expert_to_gpus` holds each expert's distinct GPUs (-1: none);
an expert with two slots on one GPU is one bin (where on the GPU its rows go does not change the GPU's load).
"""

from __future__ import annotations

import numpy as np

from agents.protocol.placement import effective_share

NUM_SWEEPS = 4  # Gauss-Seidel sweeps over the replicated experts; the benchmark's gap to the bound is after 4


def replica_gpus(slot_to_expert: np.ndarray, slot_share: np.ndarray | None, num_experts: int,
                 num_gpus: int) -> tuple[np.ndarray, np.ndarray]:
    """A placement [L, S] -> (expert_to_gpus [L, E, R] int64, gpu_share [L, E, R] float64).

    `expert_to_gpus`: each expert's distinct GPUs in slot order, -1 padded. `gpu_share`: the fixed (window) share
    of the expert's tokens each of those GPUs takes (its slots' effective shares summed), 0 on padding.
    """
    num_layers, num_slots = slot_to_expert.shape
    slots_per_gpu = num_slots // num_gpus
    share = effective_share(slot_to_expert, slot_share, num_experts)  # [L, S]
    gpus: list[list[list[int]]] = [[[] for _ in range(num_experts)] for _ in range(num_layers)]
    shares: list[list[list[float]]] = [[[] for _ in range(num_experts)] for _ in range(num_layers)]
    for layer in range(num_layers):
        for slot, expert in enumerate(slot_to_expert[layer].tolist()):
            gpu, held = slot // slots_per_gpu, gpus[layer][expert]
            if gpu in held:
                shares[layer][expert][held.index(gpu)] += float(share[layer, slot])
            else:
                held.append(gpu)
                shares[layer][expert].append(float(share[layer, slot]))
    max_replicas = max(len(held) for row in gpus for held in row)
    expert_to_gpus = np.full((num_layers, num_experts, max_replicas), -1, dtype=np.int64)
    gpu_share = np.zeros((num_layers, num_experts, max_replicas))
    for layer in range(num_layers):
        for expert in range(num_experts):
            n = len(gpus[layer][expert])
            expert_to_gpus[layer, expert, :n] = gpus[layer][expert]
            gpu_share[layer, expert, :n] = shares[layer][expert]
    return expert_to_gpus, gpu_share


def fixed_split(expert_load: np.ndarray, gpu_share: np.ndarray) -> np.ndarray:
    """The window's fixed shares applied to a step's counts, in whole tokens: [..., E] int, [..., E, R] ->
    [..., E, R] int64. Cumulative rounding: replica r takes round(c * C_r) - round(c * C_{r-1}), C the running
    share (the last is 1 exactly), so each replica is within a token of c * share and the tokens add up."""
    load = np.asarray(expert_load, dtype=np.int64)
    cum = np.cumsum(gpu_share, axis=-1)
    cum = cum / np.maximum(cum[..., -1:], 1e-300)
    upto = np.rint(load[..., None] * cum).astype(np.int64)  # [..., E, R]
    return np.diff(upto, axis=-1, prepend=0)


def gpu_load_of(tokens: np.ndarray, expert_to_gpus: np.ndarray, num_gpus: int) -> np.ndarray:
    """[..., E, R] tokens per replica GPU -> [..., G] tokens per GPU."""
    gpus = np.broadcast_to(expert_to_gpus, tokens.shape)
    lead = tokens.shape[:-2]
    rows = np.arange(int(np.prod(lead, dtype=np.int64)))[:, None]
    flat = (rows * num_gpus + gpus.reshape(len(rows), -1).clip(min=0)).ravel()
    weights = np.where(gpus >= 0, tokens, 0).ravel()
    return np.bincount(flat, weights, minlength=len(rows) * num_gpus).astype(np.int64).reshape(*lead, num_gpus)


def balance_split(expert_load: np.ndarray, expert_to_gpus: np.ndarray, gpu_share: np.ndarray, num_gpus: int,
                  num_sweeps: int = NUM_SWEEPS) -> np.ndarray:
    """The dispatch-time split (module doc): [..., E] tokens per expert -> [..., E, R] int64 tokens per replica
    GPU, started from `fixed_split` and water-filled expert by expert, `num_sweeps` times over the experts."""
    load = np.asarray(expert_load, dtype=np.int64)
    lead, num_experts = load.shape[:-1], load.shape[-1]
    gpus = np.broadcast_to(expert_to_gpus, (*lead, *expert_to_gpus.shape[-2:])).reshape(-1, num_experts,
                                                                                        expert_to_gpus.shape[-1])
    share = np.broadcast_to(gpu_share, (*lead, *gpu_share.shape[-2:])).reshape(gpus.shape)
    load = load.reshape(-1, num_experts)
    tokens = fixed_split(load, share)  # [B, E, R]
    gpu_load = gpu_load_of(tokens, gpus, num_gpus)  # [B, G]
    rows = np.arange(load.shape[0])[:, None]
    replicated = np.flatnonzero(((gpus >= 0).sum(-1) > 1).any(0))  # experts with a choice in some row
    for _ in range(num_sweeps):
        for expert in replicated:
            held, valid = gpus[:, expert].clip(min=0), gpus[:, expert] >= 0  # [B, R]
            current = np.where(valid, tokens[:, expert], 0)
            np.subtract.at(gpu_load, (rows, held), current)  # the others' load on its GPUs
            fill = water_fill(load[:, expert], np.where(valid, gpu_load[rows, held], -1), valid)
            np.add.at(gpu_load, (rows, held), fill)
            tokens[:, expert] = fill
    return tokens.reshape(*lead, *tokens.shape[-2:])


def water_fill(num_tokens: np.ndarray, level: np.ndarray, valid: np.ndarray) -> np.ndarray:
    """Whole tokens [B] poured over bins at integer levels [B, R] (only where valid) so the highest bin is as
    low as it can be: [B, R] int64 tokens per bin. Every bin ends at T-1 or T (T = ceil of the fractional
    level) or keeps its level if that was higher; the +1s go to the first bins in order, so it is deterministic."""
    big = np.iinfo(np.int64).max // 4
    lv = np.where(valid, level, big)
    ordered = np.sort(lv, axis=-1)  # [B, R]
    k = np.arange(1, lv.shape[-1] + 1)
    total = num_tokens[:, None] + np.cumsum(np.where(ordered < big, ordered, 0), axis=-1)  # [B, R]
    is_active = (ordered < big) & (k * ordered < total)  # the k lowest bins are below their common level
    num_active = np.maximum(is_active.sum(-1), 1)  # [B]; >= 1 whenever there is a valid bin
    top = -(-np.take_along_axis(total, num_active[:, None] - 1, axis=-1)[:, 0] // num_active)  # T = ceil(level)
    fill = np.where(valid, np.maximum(top[:, None] - 1 - lv, 0), 0)
    rest = num_tokens - fill.sum(-1)  # < the bins now at T-1
    at_edge = valid & (lv <= top[:, None] - 1)
    fill += at_edge & (np.cumsum(at_edge, axis=-1) <= rest[:, None])
    return fill


def split_bound(expert_load: np.ndarray, expert_to_gpus: np.ndarray, gpu_load: np.ndarray) -> np.ndarray:
    """The certificate (module doc): [..., E] tokens, [..., E, R], a split's [..., G] GPU loads -> [...] float64.

    The result is the max over k of (tokens of experts held only by the k busiest GPUs) / k. It is a lower bound on
    any split's busiest GPU, equal to the LP optimum when `gpu_load` is the LP's."""
    num_gpus = gpu_load.shape[-1]
    load = np.asarray(expert_load, dtype=np.float64)
    gpus = np.broadcast_to(expert_to_gpus, (*load.shape, expert_to_gpus.shape[-1]))
    order = np.argsort(-gpu_load, axis=-1, kind="stable")  # [..., G] busiest first
    position = np.empty_like(order)
    np.put_along_axis(position, order, np.arange(num_gpus), axis=-1)
    where = np.take_along_axis(position[..., None, :], gpus.clip(min=0), axis=-1)  # [..., E, R] rank of each GPU
    last = np.where(gpus >= 0, where, -1).max(-1)  # [..., E] the expert is inside the top k once k > last
    lead = load.shape[:-1]
    rows = np.arange(int(np.prod(lead, dtype=np.int64)))[:, None]
    inside = np.bincount((rows * num_gpus + last.reshape(len(rows), -1)).ravel(), load.reshape(len(rows), -1).ravel(),
                         minlength=len(rows) * num_gpus).reshape(len(rows), num_gpus)
    return (np.cumsum(inside, axis=-1) / np.arange(1, num_gpus + 1)).max(-1).reshape(lead)
