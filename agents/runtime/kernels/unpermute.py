"""Inverse of the permutation, twin of `moe_ops.unpermute`: row i of y_sorted goes to row order[i]."""

import torch
import triton
import triton.language as tl
from torch import Tensor

from agents.runtime import moe_ops
from agents.runtime.kernels._common import check_dtype, next_pow2


@triton.jit
def _scatter_rows_kernel(
    y_ptr, order_ptr, out_ptr, num_rows, dim, stride_y, stride_out, BLOCK_R: tl.constexpr, BLOCK_D: tl.constexpr
):
    rows = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R).to(tl.int64)
    cols = tl.program_id(1) * BLOCK_D + tl.arange(0, BLOCK_D)
    rmask = rows < num_rows
    m = rmask[:, None] & (cols < dim)[None, :]
    dest = tl.load(order_ptr + rows, mask=rmask, other=0).to(tl.int64)
    y = tl.load(y_ptr + rows[:, None] * stride_y + cols[None, :], mask=m)
    tl.store(out_ptr + dest[:, None] * stride_out + cols[None, :], y, mask=m)


def triton_impl(y_sorted: Tensor, order: Tensor, num_assignments: int) -> Tensor:
    """y_sorted [M, D] rows in permuted order, order [>= M] -> [num_assignments, D]; rows never written are 0."""
    check_dtype(y_sorted)
    num_rows, dim = y_sorted.shape
    y_sorted = y_sorted if y_sorted.stride(1) == 1 else y_sorted.contiguous()
    out = y_sorted.new_zeros(num_assignments, dim)
    block_d = min(next_pow2(dim), 256)
    block_r = max(1, 4096 // block_d)
    if num_rows:
        grid = (triton.cdiv(num_rows, block_r), triton.cdiv(dim, block_d))
        _scatter_rows_kernel[grid](
            y_sorted, order, out, num_rows, dim, y_sorted.stride(0), out.stride(0), BLOCK_R=block_r, BLOCK_D=block_d
        )
    return out


reference = moe_ops.unpermute


def make_inputs(seed: int, num_assignments=64, num_rows=56, dim=48, dtype=torch.float32, device="cpu"):
    g = torch.Generator().manual_seed(seed)
    order = torch.randperm(num_assignments, generator=g)  # the first num_rows were kept, the rest dropped
    y_sorted = torch.randn(num_rows, dim, generator=g).to(dtype)
    return y_sorted.to(device), order.to(device), num_assignments
