"""Block-aligned sort of assignments by expert (vLLM's moe_align_block_size), no host sync.

A stable counting sort in three launches:
1. `histogram._count_kernel` counts each chunk of CHUNK flat ids per bin: [C, B + 1];
2. `_offsets_kernel` (one program) turns chunk counts into each chunk's running offset per bin, pads every bin
   to a multiple of BM, and writes the start of each bin, the rows in use and the bin of every BM block;
3. `_scatter_kernel` puts each assignment at start[bin] + chunk offset + rank among equal bins earlier in its
   chunk, so the order inside a bin is ascending flat index, exactly like a stable argsort.
With block_m = 1 and keep_dropped the same kernels give `moe_ops.permute`'s order (dropped last).
"""

import torch
import triton
import triton.language as tl
from torch import Tensor

from agents.runtime.kernels import refs
from agents.runtime.kernels._common import next_pow2
from agents.runtime.kernels.histogram import count

CHUNK = 128  # ids per scatter program; the in-chunk rank costs a [CHUNK, CHUNK] compare
BLOCK_C = 16  # chunk rows the offsets kernel scans per step


@triton.jit
def _offsets_kernel(
    chunk_counts_ptr,
    chunk_offsets_ptr,
    starts_ptr,
    counts_ptr,
    num_post_pad_ptr,
    block_bins_ptr,
    num_chunks,
    num_bins,
    num_blocks,
    BLOCK_M: tl.constexpr,
    KEEP_DROPPED: tl.constexpr,
    BLOCK_BINS: tl.constexpr,
    BLOCK_C: tl.constexpr,
    BLOCK_B: tl.constexpr,
):
    b = tl.arange(0, BLOCK_BINS)
    bmask = b <= num_bins  # real bins plus the overflow (dropped) bin
    stride = num_bins + 1
    running = tl.zeros([BLOCK_BINS], tl.int32)
    for c0 in range(0, num_chunks, BLOCK_C):
        c = c0 + tl.arange(0, BLOCK_C)
        m = (c < num_chunks)[:, None] & bmask[None, :]
        tile = tl.load(chunk_counts_ptr + c[:, None] * stride + b[None, :], mask=m, other=0)  # [BLOCK_C, BINS]
        before = tl.cumsum(tile, axis=0) - tile + running[None, :]  # exclusive scan over chunks
        tl.store(chunk_offsets_ptr + c[:, None] * stride + b[None, :], before, mask=m)
        running += tl.sum(tile, axis=0)
    tl.store(counts_ptr + b, running, mask=bmask)
    laid_out = running
    if not KEEP_DROPPED:
        laid_out = tl.where(b < num_bins, running, 0)  # dropped assignments get no rows
    padded = (laid_out + BLOCK_M - 1) // BLOCK_M * BLOCK_M
    cum = tl.cumsum(padded, axis=0)  # [BINS] padded end of each bin
    tl.store(starts_ptr + b, cum - padded, mask=bmask)
    tl.store(num_post_pad_ptr, tl.sum(padded, axis=0))
    for k0 in range(0, num_blocks, BLOCK_B):  # bin of a block = number of real bins that end at or before it
        blk = k0 + tl.arange(0, BLOCK_B)
        ended = (cum[None, :] <= (blk * BLOCK_M)[:, None]) & (b < num_bins)[None, :]
        bin_of = tl.minimum(tl.sum(ended.to(tl.int32), axis=1), num_bins - 1)
        tl.store(block_bins_ptr + blk, bin_of, mask=blk < num_blocks)


@triton.jit
def _scatter_kernel(
    ids_ptr,
    chunk_offsets_ptr,
    starts_ptr,
    sorted_ptr,
    num_ids,
    num_bins,
    KEEP_DROPPED: tl.constexpr,
    CHUNK: tl.constexpr,
):
    pid = tl.program_id(0)
    j = tl.arange(0, CHUNK)
    offs = pid.to(tl.int64) * CHUNK + j
    mask = offs < num_ids
    ids = tl.load(ids_ptr + offs, mask=mask, other=-1)
    bins = tl.where(ids < 0, num_bins, ids).to(tl.int32)
    # rank among equal bins earlier in this chunk; lanes past the end sit after every real lane
    earlier = (bins[:, None] == bins[None, :]) & (j[None, :] < j[:, None])
    rank = tl.sum(earlier.to(tl.int32), axis=1)
    base = tl.load(chunk_offsets_ptr + pid * (num_bins + 1) + bins, mask=mask, other=0)
    base += tl.load(starts_ptr + bins, mask=mask, other=0)
    keep = mask if KEEP_DROPPED else mask & (ids >= 0)
    tl.store(sorted_ptr + base + rank, offs.to(sorted_ptr.dtype.element_ty), mask=keep)


def sort_by_bin(ids: Tensor, num_bins: int, block_m: int, keep_dropped: bool, out_dtype=torch.int32):
    """The shared counting sort. Returns sorted_ids, block_bins, num_post_pad [1] int32, counts [num_bins + 1]
    int32. With keep_dropped the dropped ids fill the tail (block_m must be 1) and sorted_ids has length N."""
    flat = ids.reshape(-1)
    num_ids, dev = flat.numel(), ids.device
    if keep_dropped and block_m != 1:
        raise ValueError("keep_dropped needs block_m == 1")
    max_len = num_ids if keep_dropped else num_ids + num_bins * (block_m - 1)
    num_blocks = triton.cdiv(max_len, block_m)
    sorted_ids = torch.full((max_len,), num_ids, dtype=out_dtype, device=dev)  # sentinel N pads every bin
    block_bins = torch.empty(num_blocks, dtype=torch.int32, device=dev)
    num_post_pad = torch.empty(1, dtype=torch.int32, device=dev)
    counts = torch.empty(num_bins + 1, dtype=torch.int32, device=dev)
    starts = torch.empty(num_bins + 1, dtype=torch.int32, device=dev)
    chunk_counts = count(flat, num_bins, per_chunk_block=CHUNK)  # [C, num_bins + 1]
    chunk_offsets = torch.empty_like(chunk_counts)
    block_bins_pad = next_pow2(num_bins + 1)
    _offsets_kernel[(1,)](
        chunk_counts,
        chunk_offsets,
        starts,
        counts,
        num_post_pad,
        block_bins,
        chunk_counts.shape[0],
        num_bins,
        num_blocks,
        BLOCK_M=block_m,
        KEEP_DROPPED=keep_dropped,
        BLOCK_BINS=block_bins_pad,
        BLOCK_C=BLOCK_C,
        BLOCK_B=max(16, min(256, 16384 // block_bins_pad)),
    )
    if num_ids:
        _scatter_kernel[(triton.cdiv(num_ids, CHUNK),)](
            flat, chunk_offsets, starts, sorted_ids, num_ids, num_bins, KEEP_DROPPED=keep_dropped, CHUNK=CHUNK
        )
    return sorted_ids, block_bins, num_post_pad, counts


def triton_impl(ids: Tensor, num_bins: int, block_m: int) -> tuple[Tensor, Tensor, Tensor]:
    """ids [T, K] bin per assignment (-1 dropped) -> sorted_ids [N + B*(BM-1)] int32, block_bins [blocks]
    int32, num_post_pad [1] int32; the contract of `refs.align_block_size`."""
    sorted_ids, block_bins, num_post_pad, _ = sort_by_bin(ids, num_bins, block_m, keep_dropped=False)
    return sorted_ids, block_bins, num_post_pad


reference = refs.align_block_size


def make_inputs(
    seed: int, num_tokens=40, top_k=4, num_bins=16, block_m=16, drop_fraction=0.1, one_bin=None, device="cpu"
):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, num_bins, (num_tokens, top_k), generator=g)
    if one_bin is not None:
        ids.fill_(one_bin)  # every assignment on one expert
    ids[torch.rand(num_tokens, top_k, generator=g) < drop_fraction] = -1
    return ids.to(device), num_bins, block_m
