"""The whole routed-expert path on assignments: block-aligned sort, gate/up GEMM with SwiGLU, down GEMM with the
routing weight, sum over k. Twin of the moe_ops chain permute -> grouped_swiglu -> unpermute -> combine
(`refs.fused_moe`). Token rows are read in place (row r reads x[r // K]), so nothing is gathered or unpermuted.
"""

import torch
from torch import Tensor

from agents.runtime.kernels import refs
from agents.runtime.kernels.combine import moe_sum
from agents.runtime.kernels.grouped_gemm import swiglu_experts


def triton_impl(
    x: Tensor, weights: Tensor, topk_ids: Tensor, w13: Tensor, w2: Tensor, config: dict | None = None
) -> Tensor:
    """x [T, D], weights [T, K], topk_ids [T, K] slot ids (-1 dropped), w13 [S, 2I, D], w2 [S, D, I] -> [T, D]."""
    y = swiglu_experts(x, topk_ids, w13, w2, weights.to(x.dtype), config)  # [N, D] weighted
    return moe_sum(y, topk_ids.shape[1])


reference = refs.fused_moe


def make_inputs(
    seed: int,
    num_tokens=20,
    top_k=4,
    num_slots=8,
    dim=32,
    inter=16,
    drop_fraction=0.1,
    dtype=torch.float32,
    one_slot=None,
    device="cpu",
):
    g = torch.Generator().manual_seed(seed)
    ids = torch.rand(num_tokens, num_slots, generator=g).argsort(-1)[:, :top_k]  # distinct slots per token
    if one_slot is not None:
        ids[:, 0] = one_slot  # every token uses one slot (with top_k 1: all tokens on one expert)
    weights = torch.rand(num_tokens, top_k, generator=g)
    dropped = torch.rand(num_tokens, top_k, generator=g) < drop_fraction
    ids, weights = ids.masked_fill(dropped, -1), weights.masked_fill(dropped, 0.0)
    x = torch.randn(num_tokens, dim, generator=g).to(dtype)
    w13 = (torch.randn(num_slots, 2 * inter, dim, generator=g) / dim**0.5).to(dtype)
    w2 = (torch.randn(num_slots, dim, inter, generator=g) / inter**0.5).to(dtype)
    return x.to(device), weights.to(dtype).to(device), ids.to(device), w13.to(device), w2.to(device)
