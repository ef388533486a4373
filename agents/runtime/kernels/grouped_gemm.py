"""Grouped SwiGLU expert GEMM over block-aligned sorted assignments (vLLM fused_moe_kernel design).

Two launches of one kernel:
1. Gate/up (SWIGLU): act[r] = silu(A[r // top_k] @ w13[e, :I].T) * (A[r // top_k] @ w13[e, I:].T). Both
   halves accumulate in the same program, so the [N, 2I] intermediate of vLLM's GEMM1 + silu_and_mul never exists.
2. Down (MUL_W): y[r] = (act[r] @ w2[e].T) * weight[r], the routing weight applied in the epilogue.
Rows r are flat assignment indices read from `sorted_ids` (padded per expert to BLOCK_M with the sentinel N);
the expert of each BLOCK_M block comes from `block_bins`. Storage fp16/bf16/fp32, fp32 accumulation.
`triton_impl` is the twin of `moe_ops.grouped_swiglu` (rows already grouped by slot, no weights).
"""

import torch
import triton
import triton.language as tl
from torch import Tensor

from agents.runtime import moe_ops
from agents.runtime.kernels._common import INTERPRET, check_dtype, next_pow2
from agents.runtime.kernels.align import sort_by_bin


@triton.jit
def _moe_gemm_kernel(
    a_ptr,
    b_ptr,
    c_ptr,
    w_ptr,
    sorted_ids_ptr,
    block_bins_ptr,
    num_post_pad_ptr,
    num_valid,
    num_pid_m,
    N,
    K,
    stride_am,
    stride_ak,
    stride_be,
    stride_bn,
    stride_bk,
    stride_cm,
    stride_cn,
    TOP_K: tl.constexpr,
    SWIGLU: tl.constexpr,
    MUL_W: tl.constexpr,
    PRECISION: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr,
):
    # grouped launch order: GROUP_M row blocks share each weight tile while it is in L2
    pid = tl.program_id(0)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    pids_per_group = GROUP_M * num_pid_n
    first_m = (pid // pids_per_group) * GROUP_M
    group_m = min(num_pid_m - first_m, GROUP_M)
    pid_m = first_m + (pid % pids_per_group) % group_m
    pid_n = (pid % pids_per_group) // group_m
    if pid_m * BLOCK_M >= tl.load(num_post_pad_ptr):
        return  # past the last padded block: the grid is sized without a host sync
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M).to(tl.int64)
    rows = tl.load(sorted_ids_ptr + offs_m).to(tl.int64)  # [BM] flat assignment index, N = padding
    rmask = rows < num_valid
    expert = tl.load(block_bins_ptr + pid_m).to(tl.int64)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N).to(tl.int64)
    offs_bn = offs_n % N  # wrap instead of masking the weight loads; wrapped columns are not stored
    offs_k = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + (rows // TOP_K)[:, None] * stride_am + offs_k[None, :] * stride_ak  # [BM, BK]
    b_ptrs = b_ptr + expert * stride_be + offs_bn[None, :] * stride_bn + offs_k[:, None] * stride_bk  # [BK, BN]
    acc = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
    acc_up = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        kmask = offs_k < K - k * BLOCK_K
        a = tl.load(a_ptrs, mask=rmask[:, None] & kmask[None, :], other=0.0)
        b = tl.load(b_ptrs, mask=kmask[:, None], other=0.0)
        acc = tl.dot(a, b, acc, input_precision=PRECISION)
        if SWIGLU:  # up half: rows I..2I-1 of w13
            b_up = tl.load(b_ptrs + N * stride_bn, mask=kmask[:, None], other=0.0)
            acc_up = tl.dot(a, b_up, acc_up, input_precision=PRECISION)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    if SWIGLU:
        acc = acc * tl.sigmoid(acc) * acc_up  # silu(gate) * up
    if MUL_W:
        acc = acc * tl.load(w_ptr + rows, mask=rmask, other=0.0).to(tl.float32)[:, None]
    c_ptrs = c_ptr + rows[:, None] * stride_cm + offs_n[None, :] * stride_cn
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=rmask[:, None] & (offs_n < N)[None, :])


def pick_config(num_assignments: int, num_experts: int, n: int, k: int) -> dict:
    """Block sizes by tokens per expert. The interpreter wants few, large programs; the GPU table follows
    vLLM's H200 bf16 tuned files (small M: narrow BLOCK_M, long BLOCK_K; large M: 64-128 square-ish tiles)."""
    if INTERPRET:
        return dict(
            BLOCK_M=16, BLOCK_N=max(16, min(next_pow2(n), 128)), BLOCK_K=max(16, min(next_pow2(k), 128)), GROUP_M=1
        )
    per_expert = num_assignments / max(num_experts, 1)
    if per_expert <= 16:
        return dict(BLOCK_M=16, BLOCK_N=64, BLOCK_K=128, GROUP_M=1, num_warps=4, num_stages=4)
    if per_expert <= 64:
        return dict(BLOCK_M=32, BLOCK_N=64, BLOCK_K=128, GROUP_M=8, num_warps=4, num_stages=4)
    if per_expert <= 256:
        return dict(BLOCK_M=64, BLOCK_N=128, BLOCK_K=64, GROUP_M=8, num_warps=4, num_stages=4)
    return dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, GROUP_M=16, num_warps=8, num_stages=3)


def gemm(a, b, c, weights, sorted_ids, block_bins, num_post_pad, num_valid, top_k, swiglu, config) -> None:
    """c[r] = op(a[r // top_k] @ b[e].T) for every valid row r of sorted_ids. b: [E, N(*2 if swiglu), K]."""
    n = b.shape[1] // 2 if swiglu else b.shape[1]
    kdim = b.shape[2]
    block_m, block_n = config["BLOCK_M"], config["BLOCK_N"]
    num_pid_m = min(sorted_ids.numel() // block_m, num_valid)  # each used block holds at least one valid row
    grid = (num_pid_m * triton.cdiv(n, block_n),)
    if num_pid_m == 0:
        return
    precision = "ieee" if a.dtype == torch.float32 else None  # fp32: no TF32, like torch; 16-bit: the default
    _moe_gemm_kernel[grid](
        a,
        b,
        c,
        weights if weights is not None else a,
        sorted_ids,
        block_bins,
        num_post_pad,
        num_valid,
        num_pid_m,
        n,
        kdim,
        a.stride(0),
        a.stride(1),
        b.stride(0),
        b.stride(1),
        b.stride(2),
        c.stride(0),
        c.stride(1),
        TOP_K=top_k,
        SWIGLU=swiglu,
        MUL_W=weights is not None,
        PRECISION=precision,
        **config,
    )


def swiglu_experts(
    x: Tensor, ids: Tensor, w13: Tensor, w2: Tensor, weights: Tensor | None = None, config: dict | None = None
) -> Tensor:
    """x [T, D], ids [T, K] slot per assignment (-1 dropped), w13 [S, 2I, D], w2 [S, D, I], weights [T, K] or
    None -> y [N, D] in flat assignment order (dropped rows 0), weighted if weights are given."""
    check_dtype(x, w13, w2)
    num_slots, two_i, dim = w13.shape
    top_k, num_valid = ids.shape[1], ids.numel()
    config = config or pick_config(num_valid, num_slots, two_i // 2, dim)
    sorted_ids, block_bins, num_post_pad, _ = sort_by_bin(ids, num_slots, config["BLOCK_M"], keep_dropped=False)
    act = x.new_empty(num_valid, two_i // 2)  # [N, I]; rows of dropped assignments are never read
    y = x.new_zeros(num_valid, dim)  # [N, D]
    gemm(x, w13, act, None, sorted_ids, block_bins, num_post_pad, num_valid, top_k, True, config)
    w = weights.reshape(-1).contiguous() if weights is not None else None
    gemm(act, w2, y, w, sorted_ids, block_bins, num_post_pad, num_valid, 1, False, config)
    return y


def triton_impl(x: Tensor, counts: Tensor, w13: Tensor, w2: Tensor) -> Tensor:
    """x [M, D] rows grouped by slot, counts [S] -> [M, D]; rows past sum(counts) give 0 (moe_ops contract)."""
    ends = counts.cumsum(0)  # [S]
    rows = torch.arange(x.shape[0], device=x.device)
    slot_of_row = torch.searchsorted(ends, rows, right=True)  # [M], S for rows past the end: no host sync
    slot_of_row = torch.where(slot_of_row < counts.numel(), slot_of_row, -1)
    return swiglu_experts(x, slot_of_row[:, None], w13, w2)


reference = moe_ops.grouped_swiglu


def make_inputs(seed: int, num_rows=40, num_slots=4, dim=32, inter=16, drop_rows=3, dtype=torch.float32, device="cpu"):
    g = torch.Generator().manual_seed(seed)
    kept = num_rows - drop_rows
    cut = torch.sort(torch.randint(0, kept + 1, (num_slots - 1,), generator=g)).values
    counts = torch.diff(torch.cat([torch.tensor([0]), cut, torch.tensor([kept])]))  # [S], may hold zeros
    x = torch.randn(num_rows, dim, generator=g).to(dtype)
    w13 = (torch.randn(num_slots, 2 * inter, dim, generator=g) / dim**0.5).to(dtype)
    w2 = (torch.randn(num_slots, dim, inter, generator=g) / inter**0.5).to(dtype)
    return x.to(device), counts.to(device), w13.to(device), w2.to(device)
