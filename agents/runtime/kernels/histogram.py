"""Per-expert / per-slot token histogram, twin of `moe_ops.histogram`; also the per-chunk counts for `align`.

Each program counts BLOCK ids with a one-hot reduction ([BLOCK, BLOCK_BINS] compare and sum). It adds the
vector to the global counts with one masked atomic per bin, instead of one contended atomic per id (all tokens on
one expert would serialise those). Dropped ids (-1) land in an overflow bin `num_bins` that is returned separately
or discarded. No host sync: the output is a preallocated device buffer.
"""

import torch
import triton
import triton.language as tl
from torch import Tensor

from agents.runtime import moe_ops
from agents.runtime.kernels._common import next_pow2

MAX_TILE = 65536  # BLOCK * BLOCK_BINS elements per program


@triton.jit
def _count_kernel(
    ids_ptr,
    counts_ptr,
    num_ids,
    num_bins,
    stride_chunk,
    PER_CHUNK: tl.constexpr,
    BLOCK: tl.constexpr,
    BLOCK_BINS: tl.constexpr,
):
    pid = tl.program_id(0)
    offs = pid.to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < num_ids
    ids = tl.load(ids_ptr + offs, mask=mask, other=-1)
    bins = tl.where(ids < 0, num_bins, ids)  # dropped -> overflow bin
    bins = tl.where(mask, bins, BLOCK_BINS)  # lanes past the end match no bin
    b = tl.arange(0, BLOCK_BINS)
    counts = tl.sum((bins[:, None] == b[None, :]).to(tl.int32), axis=0)  # [BLOCK_BINS]
    bmask = b <= num_bins
    if PER_CHUNK:
        tl.store(counts_ptr + pid * stride_chunk + b, counts, mask=bmask)  # row `pid` of [C, num_bins + 1]
    else:
        tl.atomic_add(counts_ptr + b, counts, mask=bmask & (counts > 0))


def block_for(num_bins: int) -> int:
    return max(16, min(1024, MAX_TILE // next_pow2(num_bins + 1)))


def count(ids: Tensor, num_bins: int, per_chunk_block: int | None = None) -> Tensor:
    """ids [...] int, -1 dropped -> int32 counts [num_bins + 1] (last: dropped), or with per_chunk_block B the
    counts of each chunk of B consecutive flat ids, [cdiv(N, B), num_bins + 1]."""
    flat = ids.reshape(-1)
    num_ids = flat.numel()
    block = per_chunk_block or block_for(num_bins)
    num_chunks = triton.cdiv(num_ids, block)
    if per_chunk_block:
        counts = torch.empty(num_chunks, num_bins + 1, dtype=torch.int32, device=ids.device)
    else:
        counts = torch.zeros(num_bins + 1, dtype=torch.int32, device=ids.device)
    if num_ids:
        _count_kernel[(num_chunks,)](
            flat,
            counts,
            num_ids,
            num_bins,
            num_bins + 1,
            PER_CHUNK=bool(per_chunk_block),
            BLOCK=block,
            BLOCK_BINS=next_pow2(num_bins + 1),
        )
    return counts


def triton_impl(ids: Tensor, num_bins: int) -> Tensor:
    """ids [...] (-1 dropped) -> int64 [num_bins] tokens per bin."""
    return count(ids, num_bins)[:num_bins].long()


reference = moe_ops.histogram


def make_inputs(seed: int, num_tokens=40, top_k=4, num_bins=32, drop_fraction=0.1, one_bin=None, device="cpu"):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, num_bins, (num_tokens, top_k), generator=g)
    if one_bin is not None:
        ids.fill_(one_bin)  # every assignment on one expert
    ids[torch.rand(num_tokens, top_k, generator=g) < drop_fraction] = -1
    return ids.to(device), num_bins
