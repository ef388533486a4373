"""The dispatch-time split in torch: each step's replica quotas from the group's per-expert counts, and the slot
each assignment goes to so the quotas hold exactly.

The algorithm, its bound and why it is never worse than the fixed shares are agents/protocol/replica_split.py's
(the NumPy definition the controller and the simulator use). These are its torch twins, op for op the same
integers (tests/contract/test_replica_split_agrees.py), so what a rank routes is what the agent reports.

Shapes: B rows (MoE layers, or one), E logical experts, R the most distinct GPUs an expert is on, G GPUs,
N = T * K assignments. Loads in tokens (token-expert assignments).
"""

import torch
from torch import Tensor

NUM_SWEEPS = 4  # as agents/protocol/replica_split.py


def fixed_split(expert_load: Tensor, gpu_share: Tensor) -> Tensor:
    """[B, E] int, [B, E, R] float64 -> [B, E, R] int64: the window shares on this step's counts, cumulative
    rounding (each replica within a token of its share)."""
    cum = gpu_share.to(torch.float64).cumsum(-1)
    cum = cum / cum[..., -1:].clamp(min=1e-300)
    upto = torch.round(expert_load.to(torch.float64)[..., None] * cum).to(torch.int64)
    return torch.diff(upto, dim=-1, prepend=torch.zeros_like(upto[..., :1]))


def gpu_load_of(tokens: Tensor, expert_to_gpus: Tensor, num_gpus: int) -> Tensor:
    """[B, E, R] tokens per replica GPU -> [B, G] int64 tokens per GPU."""
    out = torch.zeros(tokens.shape[0], num_gpus, dtype=torch.int64, device=tokens.device)
    return out.scatter_add_(1, expert_to_gpus.clamp(min=0).flatten(1),
                            torch.where(expert_to_gpus >= 0, tokens, 0).flatten(1))


def water_fill(num_tokens: Tensor, level: Tensor, valid: Tensor) -> Tensor:
    """[B] tokens over bins at [B, R] integer levels (where valid) -> [B, R] int64, the highest bin lowest."""
    big = torch.iinfo(torch.int64).max // 4
    lv = torch.where(valid, level, big)
    ordered = lv.sort(-1).values
    k = torch.arange(1, lv.shape[-1] + 1, device=lv.device)
    total = num_tokens[:, None] + torch.where(ordered < big, ordered, 0).cumsum(-1)
    is_active = (ordered < big) & (k * ordered < total)
    num_active = is_active.sum(-1).clamp(min=1)
    top = -torch.div(-total.gather(1, num_active[:, None] - 1)[:, 0], num_active, rounding_mode="floor")
    fill = torch.where(valid, (top[:, None] - 1 - lv).clamp(min=0), 0)
    rest = num_tokens - fill.sum(-1)
    at_edge = valid & (lv <= top[:, None] - 1)
    return fill + (at_edge & (at_edge.cumsum(-1) <= rest[:, None])).to(torch.int64)


def replicated_experts(expert_to_gpus: Tensor) -> list[int]:
    """[B, E, R] -> the experts on more than one GPU in some row: the only ones a split can move (read on the host
    once per placement, so a step needs no sync for it)."""
    return ((expert_to_gpus >= 0).sum(-1) > 1).any(0).nonzero().flatten().tolist()


def balance_split(expert_load: Tensor, expert_to_gpus: Tensor, gpu_share: Tensor, num_gpus: int,
                  num_sweeps: int = NUM_SWEEPS, replicated: list[int] | None = None) -> Tensor:
    """[B, E] tokens per expert -> [B, E, R] int64 tokens per replica GPU: the fixed shares, then water-filled
    one replicated expert at a time, `num_sweeps` times. replicated: `replicated_experts` of the table, if kept."""
    tokens = fixed_split(expert_load, gpu_share)
    gpu_load = gpu_load_of(tokens, expert_to_gpus, num_gpus)  # [B, G]
    is_valid = expert_to_gpus >= 0
    replicated = replicated_experts(expert_to_gpus) if replicated is None else replicated
    for _ in range(num_sweeps):
        for expert in replicated:
            held, valid = expert_to_gpus[:, expert].clamp(min=0), is_valid[:, expert]  # [B, R]
            gpu_load.scatter_add_(1, held, -torch.where(valid, tokens[:, expert], 0))
            fill = water_fill(expert_load[:, expert], torch.where(valid, gpu_load.gather(1, held), -1), valid)
            gpu_load.scatter_add_(1, held, fill)
            tokens[:, expert] = fill
    return tokens


def split_bound(expert_load: Tensor, expert_to_gpus: Tensor, gpu_load: Tensor) -> Tensor:
    """[B, E], [B, E, R], [B, G] -> [B] float64: the cut lower bound on the busiest GPU (the protocol's)."""
    num_rows, num_gpus = gpu_load.shape
    order = torch.sort(gpu_load, dim=-1, descending=True, stable=True).indices
    position = torch.empty_like(order).scatter_(1, order, torch.arange(num_gpus, device=order.device).expand_as(order))
    where = position.gather(1, expert_to_gpus.clamp(min=0).flatten(1)).view_as(expert_to_gpus)
    last = torch.where(expert_to_gpus >= 0, where, -1).amax(-1)  # [B, E]
    inside = torch.zeros(num_rows, num_gpus, dtype=torch.float64, device=gpu_load.device)
    inside.scatter_add_(1, last, expert_load.to(torch.float64))
    k = torch.arange(1, num_gpus + 1, device=gpu_load.device)
    return (inside.cumsum(-1) / k).amax(-1)


def rank_in_expert(ids: Tensor, num_experts: int) -> Tensor:
    """[N] expert ids (-1: dropped) -> [N] int64 how many earlier assignments (flat order) went to the same
    expert, by a stable sort (no [N, E] one-hot)."""
    keys = torch.where(ids < 0, num_experts, ids)
    order = torch.argsort(keys, stable=True)
    counts = torch.bincount(keys, minlength=num_experts + 1)
    start = counts.cumsum(0) - counts  # [E + 1] first position of each expert in sorted order
    ranks = torch.empty_like(order)
    ranks[order] = torch.arange(ids.numel(), device=ids.device) - start[keys[order]]
    return ranks


def select_split_slots(topk_ids: Tensor, offset: Tensor, tokens: Tensor, gpu_slot: Tensor) -> Tensor:
    """Route by the step's quotas: [T, K] expert ids (-1: dropped), [E] assignments of lower ranks to each expert,
    [E, R] the quota of each replica GPU, [E, R] the slot holding the expert there -> [T, K] slot ids.

    The group's assignments to an expert are numbered rank by rank, then in flat order inside a rank; replica r
    takes numbers [sum of quotas before r, sum up to r). Every rank numbers the same way from the same
    all-gathered counts, so each GPU receives exactly its quota and no rank talks to another to agree."""
    flat = topk_ids.flatten()
    safe = flat.clamp(min=0)
    number = offset[safe] + rank_in_expert(flat, tokens.shape[0])  # [N]
    bounds = tokens.cumsum(-1)[safe]  # [N, R]
    replica = (number[:, None] >= bounds).sum(-1).clamp(max=tokens.shape[1] - 1)
    slots = gpu_slot[safe, replica]
    return slots.masked_fill(flat < 0, -1).view_as(topk_ids)
