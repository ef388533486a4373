"""Torch references for the kernel-shaped ops that `moe_ops` does not have (torch only, no triton).

Shapes: T tokens, K = top_k, E experts (or S slots), N = T * K assignments, D model dim, I expert inter dim,
BM = block_m rows per GEMM block. An id of -1 marks a dropped assignment.
"""

import torch
from torch import Tensor

from agents.runtime import moe_ops

MAX_INT8 = 127.0


def grouped_topk(
    scores: Tensor,
    bias: Tensor,
    num_groups: int,
    topk_group: int,
    top_k: int,
    route_scale: float,
    return_recall: bool = False,
):
    """moe_ops.grouped_topk; with return_recall also moe_ops.routing_recall of its ids ([] int64)."""
    weights, topk_ids = moe_ops.grouped_topk(scores, bias, num_groups, topk_group, top_k, route_scale)
    if not return_recall:
        return weights, topk_ids
    return weights, topk_ids, moe_ops.routing_recall(scores, bias, topk_ids)


def align_block_size(ids: Tensor, num_bins: int, block_m: int) -> tuple[Tensor, Tensor, Tensor]:
    """vLLM's moe_align_block_size contract, without host syncs.

    `ids`: [T, K] bin per assignment (-1: dropped). Returns:
    `sorted_ids` [N + num_bins * (BM - 1)] int32: flat assignment indices grouped by bin, each bin padded to a
        multiple of BM with the sentinel N, stable (ascending index) within a bin. Dropped ids are left out.
    `block_bins` [cdiv(len(sorted_ids), BM)] int32: the bin of each BM block (clamped to num_bins - 1 past the end).
    `num_post_pad` [1] int32: rows in use, a multiple of BM.
    """
    flat = ids.flatten().long()  # [N]
    n = flat.numel()
    bins = torch.where(flat < 0, num_bins, flat)  # dropped land in an overflow bin that is never laid out
    counts = torch.zeros(num_bins + 1, dtype=torch.long, device=ids.device).scatter_add_(0, bins, torch.ones_like(bins))
    counts = counts[:num_bins]
    padded = (counts + block_m - 1) // block_m * block_m  # [B]
    cum_pad = padded.cumsum(0)
    starts = torch.cat([cum_pad.new_zeros(1), cum_pad])  # [B + 1], the overflow bin starts past the end
    order = torch.argsort(bins, stable=True)  # [N]
    first = counts.cumsum(0) - counts  # [B] first sorted position of each bin without padding
    first = torch.cat([first, counts.sum(0, keepdim=True)])
    rank = torch.arange(n, device=ids.device) - first[bins[order]]  # rank of each assignment inside its bin
    max_len = n + num_bins * (block_m - 1)
    sorted_ids = torch.full((max_len + 1,), n, dtype=torch.int32, device=ids.device)  # +1: a trash row for drops
    pos = torch.where(bins[order] < num_bins, starts[bins[order]] + rank, max_len)
    sorted_ids[pos] = order.int()
    sorted_ids = sorted_ids[:max_len]
    num_blocks = (max_len + block_m - 1) // block_m
    block_starts = torch.arange(num_blocks, device=ids.device) * block_m
    block_bins = torch.searchsorted(cum_pad, block_starts, right=True).clamp_max(num_bins - 1).int()
    return sorted_ids, block_bins, cum_pad[-1:].int()


def fused_moe(x: Tensor, weights: Tensor, topk_ids: Tensor, w13: Tensor, w2: Tensor) -> Tensor:
    """The moe_ops MoE path: x [T, D], weights/topk_ids [T, K], w13 [S, 2I, D], w2 [S, D, I] -> [T, D]."""
    num_slots, top_k = w13.shape[0], topk_ids.shape[1]
    order, counts = moe_ops.permute(topk_ids, num_slots)
    y = moe_ops.grouped_swiglu(x[order // top_k], counts, w13, w2)  # [N, D]
    return moe_ops.combine(moe_ops.unpermute(y, order, topk_ids.numel()), weights.to(x.dtype))


def default_group_size(dim: int) -> int:
    return 128 if dim % 128 == 0 else dim  # DeepEP's 128-channel groups when they fit, else one group per token


def quantize(x: Tensor, group_size: int | None = None) -> tuple[Tensor, Tensor]:
    """int8 per-token (per group of channels) symmetric quantisation before dispatch.

    `x`: [M, D] -> `q` [M, D] int8, `scale` [M, D // group_size] fp32 with scale = amax / 127 per group.
    `q` = round_half_away(x * (127 / amax)); an all-zero group has scale 0 and q 0.
    Error bound after dequantize: |x_hat - x| <= scale / 2 (+ fp32 rounding, + output-dtype rounding).
    """
    group_size = group_size or default_group_size(x.shape[1])
    if x.shape[1] % group_size:
        raise ValueError("group_size must divide the model dim")
    g = x.float().view(x.shape[0], -1, group_size)  # [M, G, group]
    amax = g.abs().amax(-1)  # [M, G]
    inv = torch.where(amax > 0, MAX_INT8 / amax, torch.zeros_like(amax))
    v = g * inv[..., None]
    q = (torch.sign(v) * torch.floor(v.abs() + 0.5)).clamp(-MAX_INT8, MAX_INT8)  # half away from zero, as in Triton
    return q.to(torch.int8).view_as(x), amax / MAX_INT8


def dequantize(q: Tensor, scale: Tensor, dtype: torch.dtype = torch.float32) -> Tensor:
    """q [M, D] int8, scale [M, G] fp32 -> [M, D] dtype."""
    m, d = q.shape
    out = q.float().view(m, scale.shape[1], -1) * scale[..., None]
    return out.view(m, d).to(dtype)


def pack(q: Tensor, scale: Tensor) -> Tensor:
    """One int8 wire buffer [M, D + 4G]: q then the fp32 scales' bytes, so dispatch is one all-to-all."""
    return torch.cat([q, scale.contiguous().view(torch.int8)], dim=1)


def unpack(buf: Tensor, dim: int) -> tuple[Tensor, Tensor]:
    return buf[:, :dim], buf[:, dim:].contiguous().view(torch.float32)
