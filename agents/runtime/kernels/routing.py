"""Biased group-limited top-k routing (DeepSeek-V3 noaux_tc), twin of `moe_ops.grouped_topk`.

One program routes BLOCK_T tokens with the whole [BLOCK_T, E] score tile in registers. It computes group scores
(sum of the top-2 biased scores per group), the top `topk_group` groups, and the top-k over the kept experts by
biased score. Weights come from the unbiased scores, renormalised and scaled. With return_recall it also counts,
per token, how many of the unconstrained top-k (no group limit) survived, the numerator of routing recall
(`moe_ops.routing_recall`).
Ties break to the lower expert index.
"""

import torch
import triton
import triton.language as tl
from torch import Tensor

from agents.runtime.kernels import refs
from agents.runtime.kernels._common import check_dtype, next_pow2

NEG_INF = float("-inf")


@triton.jit
def _argmax_lowest(v, cols, BLOCK: tl.constexpr):
    m = tl.max(v, axis=1)  # [BLOCK_T]
    return tl.min(tl.where(v == m[:, None], cols[None, :], BLOCK), axis=1)  # lowest index among ties


@triton.jit
def _grouped_topk_kernel(
    scores_ptr,
    bias_ptr,
    weights_ptr,
    ids_ptr,
    kept_ptr,
    num_tokens,
    stride_s,
    route_scale,
    NUM_EXPERTS: tl.constexpr,
    NUM_GROUPS: tl.constexpr,
    TOPK_GROUP: tl.constexpr,
    TOPK: tl.constexpr,
    USE_GROUPS: tl.constexpr,
    WITH_RECALL: tl.constexpr,
    BLOCK_T: tl.constexpr,
    BLOCK_E: tl.constexpr,
    BLOCK_G: tl.constexpr,
    BLOCK_K: tl.constexpr,
):
    rows = tl.program_id(0) * BLOCK_T + tl.arange(0, BLOCK_T).to(tl.int64)  # [BLOCK_T]
    rmask = rows < num_tokens
    cols = tl.arange(0, BLOCK_E)  # [BLOCK_E]
    cmask = cols < NUM_EXPERTS
    s = tl.load(
        scores_ptr + rows[:, None] * stride_s + cols[None, :], mask=rmask[:, None] & cmask[None, :], other=0.0
    ).to(tl.float32)  # [BLOCK_T, BLOCK_E] unbiased affinities
    b = tl.load(bias_ptr + cols, mask=cmask, other=0.0).to(tl.float32)
    biased = tl.where(cmask[None, :], s + b[None, :], NEG_INF)  # padded experts never win
    sel = biased
    if USE_GROUPS:
        gid = cols // (NUM_EXPERTS // NUM_GROUPS)  # [BLOCK_E] group of each expert
        gcols = tl.arange(0, BLOCK_G)
        gscore = tl.full([BLOCK_T, BLOCK_G], NEG_INF, tl.float32)
        for g in tl.static_range(NUM_GROUPS):
            v = tl.where((gid == g)[None, :], biased, NEG_INF)
            i1 = _argmax_lowest(v, cols, BLOCK_E)
            m1 = tl.max(v, axis=1)
            m2 = tl.max(tl.where(cols[None, :] == i1[:, None], NEG_INF, v), axis=1)
            gscore = tl.where(gcols[None, :] == g, (m1 + m2)[:, None], gscore)  # top-2 sum of group g
        keep = tl.zeros([BLOCK_T, BLOCK_E], tl.int32)
        for _ in tl.static_range(TOPK_GROUP):
            gi = _argmax_lowest(gscore, gcols, BLOCK_G)
            keep = tl.where(gid[None, :] == gi[:, None], 1, keep)
            gscore = tl.where(gcols[None, :] == gi[:, None], NEG_INF, gscore)
        sel = tl.where(keep > 0, biased, NEG_INF)

    kcols = tl.arange(0, BLOCK_K)
    w = tl.zeros([BLOCK_T, BLOCK_K], tl.float32)
    ids = tl.zeros([BLOCK_T, BLOCK_K], tl.int64)
    chosen = tl.zeros([BLOCK_T, BLOCK_E], tl.int32)
    for k in tl.static_range(TOPK):  # descending biased score, like torch.topk(sorted=True)
        idx = _argmax_lowest(sel, cols, BLOCK_E)
        hit = cols[None, :] == idx[:, None]
        wk = tl.sum(tl.where(hit, s, 0.0), axis=1)  # weight from the unbiased score
        w = tl.where(kcols[None, :] == k, wk[:, None], w)
        ids = tl.where(kcols[None, :] == k, idx[:, None].to(tl.int64), ids)
        chosen = tl.where(hit, 1, chosen)
        sel = tl.where(hit, NEG_INF, sel)
    den = tl.where(rmask, tl.sum(w, axis=1), 1.0)  # rows past the end hold zeros; avoid 0 / 0
    w = w / den[:, None] * route_scale
    out_mask = rmask[:, None] & (kcols[None, :] < TOPK)
    out_offs = rows[:, None] * TOPK + kcols[None, :]
    tl.store(weights_ptr + out_offs, w.to(weights_ptr.dtype.element_ty), mask=out_mask)
    tl.store(ids_ptr + out_offs, ids, mask=out_mask)

    if WITH_RECALL:
        free = biased  # unconstrained choice: top-k of the biased scores without the group limit
        kept = tl.zeros([BLOCK_T], tl.int32)
        for _ in tl.static_range(TOPK):
            idx = _argmax_lowest(free, cols, BLOCK_E)
            hit = cols[None, :] == idx[:, None]
            kept += tl.sum(tl.where(hit & (chosen > 0), 1, 0), axis=1)
            free = tl.where(hit, NEG_INF, free)
        tl.store(kept_ptr + rows, kept, mask=rmask)


def triton_impl(
    scores: Tensor,
    bias: Tensor,
    num_groups: int,
    topk_group: int,
    top_k: int,
    route_scale: float,
    return_recall: bool = False,
):
    """scores [T, E] sigmoid affinities, bias [E] -> weights [T, K] (scores.dtype), topk_ids [T, K] int64
    (and, with return_recall, the [] int64 count of unconstrained top-k choices that were kept)."""
    check_dtype(scores)
    num_tokens, num_experts = scores.shape
    if not 1 <= top_k <= num_experts:
        raise ValueError("top_k must be in [1, num_experts]")
    scores = scores if scores.stride(1) == 1 else scores.contiguous()
    bias = bias.contiguous()
    weights = torch.empty(num_tokens, top_k, dtype=scores.dtype, device=scores.device)
    topk_ids = torch.empty(num_tokens, top_k, dtype=torch.int64, device=scores.device)
    kept = torch.empty(num_tokens if return_recall else 1, dtype=torch.int32, device=scores.device)
    use_groups = num_groups > 1 and topk_group < num_groups  # same condition as moe_ops
    block_e = next_pow2(num_experts)
    block_t = max(1, min(16, 4096 // block_e))  # keep the [BLOCK_T, E] tiles register-sized on GPU
    grid = (triton.cdiv(num_tokens, block_t),)
    if num_tokens:
        _grouped_topk_kernel[grid](
            scores,
            bias,
            weights,
            topk_ids,
            kept,
            num_tokens,
            scores.stride(0),
            float(route_scale),
            NUM_EXPERTS=num_experts,
            NUM_GROUPS=num_groups,
            TOPK_GROUP=topk_group,
            TOPK=top_k,
            USE_GROUPS=use_groups,
            WITH_RECALL=return_recall,
            BLOCK_T=block_t,
            BLOCK_E=block_e,
            BLOCK_G=next_pow2(num_groups),
            BLOCK_K=next_pow2(top_k),
        )
    if not return_recall:
        return weights, topk_ids
    return weights, topk_ids, kept[:num_tokens].sum(dtype=torch.int64)


reference = refs.grouped_topk


def make_inputs(
    seed: int,
    num_tokens=33,
    num_experts=32,
    num_groups=4,
    topk_group=2,
    top_k=4,
    route_scale=2.5,
    dtype=torch.float32,
    return_recall=True,
    hot_expert=None,
    device="cpu",
):
    g = torch.Generator().manual_seed(seed)
    scores = torch.sigmoid(torch.randn(num_tokens, num_experts, generator=g)).to(dtype)
    bias = 0.1 * torch.randn(num_experts, generator=g)  # fp32, like the e_score_correction_bias buffer
    if hot_expert is not None:
        bias[hot_expert] = 10.0  # every token picks it
    return (scores.to(device), bias.to(device), num_groups, topk_group, top_k, route_scale, return_recall)
