"""Weighted sum of each token's K expert outputs, twin of `moe_ops.combine`; also the unweighted `moe_sum`.

fp32 accumulation in the fixed k order 0..K-1 (so the result does not depend on placement), one cast at the end.
"""

import torch
import triton
import triton.language as tl
from torch import Tensor

from agents.runtime import moe_ops
from agents.runtime.kernels._common import check_dtype, next_pow2


@triton.jit
def _combine_kernel(
    y_ptr,
    w_ptr,
    out_ptr,
    num_tokens,
    dim,
    stride_y,
    stride_out,
    TOPK: tl.constexpr,
    HAS_WEIGHTS: tl.constexpr,
    BLOCK_T: tl.constexpr,
    BLOCK_D: tl.constexpr,
):
    tok = tl.program_id(0) * BLOCK_T + tl.arange(0, BLOCK_T).to(tl.int64)
    cols = tl.program_id(1) * BLOCK_D + tl.arange(0, BLOCK_D)
    tmask = tok < num_tokens
    m = tmask[:, None] & (cols < dim)[None, :]
    acc = tl.zeros([BLOCK_T, BLOCK_D], tl.float32)
    for k in tl.static_range(TOPK):
        y = tl.load(y_ptr + (tok * TOPK + k)[:, None] * stride_y + cols[None, :], mask=m, other=0.0).to(tl.float32)
        if HAS_WEIGHTS:
            y = y * tl.load(w_ptr + tok * TOPK + k, mask=tmask, other=0.0).to(tl.float32)[:, None]
        acc += y
    tl.store(out_ptr + tok[:, None] * stride_out + cols[None, :], acc.to(out_ptr.dtype.element_ty), mask=m)


def _launch(y: Tensor, weights: Tensor | None, num_tokens: int, top_k: int) -> Tensor:
    check_dtype(y)
    dim = y.shape[-1]
    y = y.reshape(num_tokens * top_k, dim)
    y = y if y.stride(1) == 1 else y.contiguous()
    out = y.new_empty(num_tokens, dim)
    block_d = min(next_pow2(dim), 512)
    block_t = max(1, 2048 // block_d)
    if num_tokens:
        grid = (triton.cdiv(num_tokens, block_t), triton.cdiv(dim, block_d))
        w = weights.contiguous() if weights is not None else y  # unused pointer when HAS_WEIGHTS is off
        _combine_kernel[grid](
            y,
            w,
            out,
            num_tokens,
            dim,
            y.stride(0),
            out.stride(0),
            TOPK=top_k,
            HAS_WEIGHTS=weights is not None,
            BLOCK_T=block_t,
            BLOCK_D=block_d,
        )
    return out


def triton_impl(y: Tensor, weights: Tensor) -> Tensor:
    """y [N, D] expert outputs in flat assignment order, weights [T, K] -> [T, D] in y.dtype."""
    return _launch(y, weights, *weights.shape)


def moe_sum(y: Tensor, top_k: int) -> Tensor:
    """y [T * K, D] already weighted -> [T, D]: sum over k."""
    return _launch(y, None, y.shape[0] // top_k, top_k)


reference = moe_ops.combine


def make_inputs(seed: int, num_tokens=24, top_k=4, dim=48, dtype=torch.float32, device="cpu"):
    g = torch.Generator().manual_seed(seed)
    y = torch.randn(num_tokens * top_k, dim, generator=g).to(dtype)
    weights = torch.rand(num_tokens, top_k, generator=g).to(dtype)
    return y.to(device), weights.to(device)
