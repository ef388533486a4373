"""MoE hot ops as plain torch functions; Triton twins in kernels/ will match these signatures.

Shapes: T tokens, K = top_k, E logical experts, S physical slots, N = T * K assignments, D model dim.
An id of -1 marks an assignment dropped by a capacity limit.
"""

import torch
import torch.nn.functional as F
from torch import Tensor

GOLDEN = 0.6180339887498949


def grouped_topk(
    scores: Tensor, bias: Tensor, num_groups: int, topk_group: int, top_k: int, route_scale: float
) -> tuple[Tensor, Tensor]:
    num_tokens, num_experts = scores.shape  # [T, E] sigmoid affinities
    biased = scores + bias  # [T, E], used for selection only
    if num_groups > 1 and topk_group < num_groups:
        group_scores = (
            biased.view(num_tokens, num_groups, num_experts // num_groups).topk(2, dim=-1).values.sum(-1)
        )  # [T, G]
        keep = group_scores.topk(topk_group, dim=-1).indices  # [T, topk_group]
        group_mask = torch.zeros_like(group_scores, dtype=torch.bool).scatter_(1, keep, True)  # [T, G]
        expert_mask = group_mask.repeat_interleave(num_experts // num_groups, dim=1)  # [T, E]
        biased = biased.masked_fill(~expert_mask, float("-inf"))
    topk_ids = biased.topk(top_k, dim=-1).indices  # [T, K]
    weights = scores.gather(1, topk_ids)  # [T, K] from unbiased scores
    weights = weights / weights.sum(-1, keepdim=True) * route_scale
    return weights, topk_ids


def routing_recall(scores: Tensor, bias: Tensor, topk_ids: Tensor) -> Tensor:
    free_ids = (scores + bias).topk(topk_ids.shape[1], dim=-1).indices  # [T, K] unconstrained choice
    return (free_ids[:, :, None] == topk_ids[:, None, :]).any(-1).sum()  # [] kept assignments


def limit_capacity(
    weights: Tensor, topk_ids: Tensor, num_experts: int, max_tokens_per_expert: int
) -> tuple[Tensor, Tensor]:
    flat_ids = topk_ids.flatten()  # [N]
    order = torch.argsort(weights.flatten(), descending=True, stable=True)  # best assignments first
    ids_by_weight = flat_ids[order]
    onehot = F.one_hot(ids_by_weight.clamp(min=0), num_experts) * (ids_by_weight >= 0)[:, None]  # [N, E]
    rank_in_expert = (onehot.cumsum(0) * onehot).sum(-1) - 1  # [N]
    is_kept = torch.empty_like(rank_in_expert, dtype=torch.bool)
    is_kept[order] = (rank_in_expert < max_tokens_per_expert) & (ids_by_weight >= 0)
    is_kept = is_kept.view_as(topk_ids)
    return weights.masked_fill(~is_kept, 0.0), topk_ids.masked_fill(~is_kept, -1)


def select_slots(topk_ids: Tensor, expert_to_slots: Tensor, cum_share: Tensor) -> Tensor:
    flat_ids = topk_ids.flatten()  # [N]
    idx = torch.arange(flat_ids.numel(), device=flat_ids.device, dtype=torch.float64)
    u = torch.frac((idx + 0.5) * GOLDEN).to(cum_share.dtype)  # [N] low-discrepancy in [0, 1)
    safe = flat_ids.clamp(min=0)
    replica = (u[:, None] >= cum_share[safe]).sum(-1).clamp(max=expert_to_slots.shape[1] - 1)  # [N]
    slots = expert_to_slots[safe, replica]  # [N]
    return slots.masked_fill(flat_ids < 0, -1).view_as(topk_ids)  # [T, K]


def histogram(ids: Tensor, num_bins: int) -> Tensor:
    flat = ids.flatten()
    bins = torch.where(flat < 0, num_bins, flat)  # dropped ids land in an overflow bin
    counts = torch.zeros(num_bins + 1, dtype=torch.int64, device=ids.device)
    counts.scatter_add_(0, bins, torch.ones_like(bins))
    return counts[:num_bins]  # [num_bins]


def num_distinct(ids: Tensor, num_values: int) -> Tensor:
    """[T, K] ids in [0, num_values) (-1: dropped) -> [T] distinct ids per row, without a host sync."""
    seen = torch.zeros(ids.shape[0], num_values + 1, dtype=torch.bool, device=ids.device)
    seen.scatter_(1, torch.where(ids < 0, num_values, ids), True)  # dropped ids mark a column cut off below
    return seen[:, :num_values].sum(1)


def reach(
    topk_ids: Tensor, slot_ids: Tensor, experts_per_group: int, num_groups: int, slots_per_node: int, num_nodes: int
) -> tuple[Tensor, Tensor]:
    """What a group limit bounds, as routed: [T, K] expert and slot ids (-1: dropped) -> ([K + 1], [K + 1])
    tokens by the number of distinct expert groups, and of distinct nodes, their top-k experts reached.

    Nodes own consecutive ranks and ranks consecutive slots, so a slot's node is slot // slots_per_node."""
    top_k = topk_ids.shape[1]
    groups = num_distinct(topk_ids.div(experts_per_group, rounding_mode="floor"), num_groups)  # -1 stays -1
    nodes = num_distinct(slot_ids.div(slots_per_node, rounding_mode="floor"), num_nodes)
    return histogram(groups, top_k + 1), histogram(nodes, top_k + 1)


def permute(slot_ids: Tensor, num_slots: int) -> tuple[Tensor, Tensor]:
    flat = slot_ids.flatten()  # [N]
    keys = torch.where(flat < 0, num_slots, flat)
    order = torch.argsort(keys, stable=True)  # [N] flat assignment index, grouped by slot, dropped last
    return order, histogram(flat, num_slots)  # counts: [S]


def unpermute(y_sorted: Tensor, order: Tensor, num_assignments: int) -> Tensor:
    out = y_sorted.new_zeros(num_assignments, y_sorted.shape[1])  # [N, D], dropped rows stay zero
    return out.index_copy(0, order[: y_sorted.shape[0]], y_sorted)


def grouped_swiglu(x: Tensor, counts: Tensor, w13: Tensor, w2: Tensor) -> Tensor:
    # x: [M, D] rows grouped by slot; counts: [S]; w13: [S, 2I, D]; w2: [S, D, I] -> [M, D]
    outs, start = [], 0
    for slot, n in enumerate(counts.tolist()):
        if n:
            gate, up = (x[start : start + n] @ w13[slot].t()).chunk(2, dim=-1)  # [n, I] each
            outs.append((F.silu(gate) * up) @ w2[slot].t())  # [n, D]
            start += n
    if start < x.shape[0]:
        outs.append(x.new_zeros(x.shape[0] - start, w2.shape[1]))
    return torch.cat(outs) if outs else x.new_zeros(0, w2.shape[1])


def combine(y: Tensor, weights: Tensor) -> Tensor:
    # y: [N, D] expert outputs in flat assignment order; weights: [T, K] -> [T, D]
    num_tokens, top_k = weights.shape
    y = y.view(num_tokens, top_k, y.shape[-1])
    out = y[:, 0] * weights[:, :1]
    for k in range(1, top_k):  # fixed summation order: identical result for any placement
        out = out + y[:, k] * weights[:, k : k + 1]
    return out.to(y.dtype)
