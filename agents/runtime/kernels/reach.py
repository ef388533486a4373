"""Groups and nodes each token's top-k reached, as histograms: twin of `moe_ops.reach`, in one launch.

The torch twin is about ten small ops per MoE layer and step (a launch each on a GPU). This program reads
a block of tokens' K expert and slot ids once and maps them to groups and nodes. It counts each row's distinct
values (a value counts where no earlier column of its row holds it: a [BLOCK, K, K] compare, K is small).
It adds a one-hot sum per program to the two [K + 1] histograms with one masked atomic per bin, as
histogram.py does. Dropped ids (-1) reach nothing. No host sync.
"""

import torch
import triton
import triton.language as tl
from torch import Tensor

from agents.runtime import moe_ops
from agents.runtime.kernels._common import next_pow2

MAX_TILE = 8192  # BLOCK * BLOCK_K * BLOCK_K elements of the per-program compare


@triton.jit
def _distinct(values, valid, BLOCK_K: tl.constexpr):
    """[BLOCK, BLOCK_K] values -> [BLOCK] distinct valid values per row."""
    k = tl.arange(0, BLOCK_K)
    same = values[:, :, None] == values[:, None, :]  # [BLOCK, i, j]
    earlier = (k[:, None] < k[None, :])[None, :, :]
    seen = tl.sum((same & earlier & valid[:, :, None]).to(tl.int32), axis=1) > 0  # [BLOCK, j]: an i < j holds it
    return tl.sum((valid & ~seen).to(tl.int32), axis=1)


@triton.jit
def _count_into(counts_ptr, distinct, row_mask, TOP_K: tl.constexpr, BLOCK_BINS: tl.constexpr):
    b = tl.arange(0, BLOCK_BINS)
    bins = tl.where(row_mask, distinct, BLOCK_BINS)  # rows past the end match no bin
    counts = tl.sum((bins[:, None] == b[None, :]).to(tl.int32), axis=0)  # [BLOCK_BINS]
    tl.atomic_add(counts_ptr + b, counts, mask=(b <= TOP_K) & (counts > 0))


@triton.jit
def _reach_kernel(
    ids_ptr,
    slots_ptr,
    groups_ptr,
    nodes_ptr,
    num_tokens,
    experts_per_group,
    slots_per_node,
    TOP_K: tl.constexpr,
    BLOCK: tl.constexpr,
    BLOCK_K: tl.constexpr,
    BLOCK_BINS: tl.constexpr,
):
    pid = tl.program_id(0)
    rows = pid.to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    k = tl.arange(0, BLOCK_K)
    row_mask = rows < num_tokens
    mask = row_mask[:, None] & (k[None, :] < TOP_K)
    offs = rows[:, None] * TOP_K + k[None, :]
    ids = tl.load(ids_ptr + offs, mask=mask, other=-1)  # [BLOCK, BLOCK_K]
    slots = tl.load(slots_ptr + offs, mask=mask, other=-1)
    _count_into(groups_ptr, _distinct(ids // experts_per_group, ids >= 0, BLOCK_K), row_mask, TOP_K, BLOCK_BINS)
    _count_into(nodes_ptr, _distinct(slots // slots_per_node, slots >= 0, BLOCK_K), row_mask, TOP_K, BLOCK_BINS)


def triton_impl(
    topk_ids: Tensor, slot_ids: Tensor, experts_per_group: int, num_groups: int, slots_per_node: int, num_nodes: int
) -> tuple[Tensor, Tensor]:
    """[T, K] expert and slot ids (-1 dropped) -> int64 ([K + 1], [K + 1]) tokens by distinct groups / nodes.
    num_groups, num_nodes: the signature of moe_ops.reach (the ids already bound them)."""
    num_tokens, top_k = topk_ids.shape
    groups = torch.zeros(top_k + 1, dtype=torch.int32, device=topk_ids.device)
    nodes = torch.zeros_like(groups)
    if num_tokens:
        block_k = max(2, next_pow2(top_k))
        block = max(16, min(128, MAX_TILE // (block_k * block_k)))
        _reach_kernel[(triton.cdiv(num_tokens, block),)](
            topk_ids.contiguous(),
            slot_ids.contiguous(),
            groups,
            nodes,
            num_tokens,
            experts_per_group,
            slots_per_node,
            TOP_K=top_k,
            BLOCK=next_pow2(block),
            BLOCK_K=block_k,
            BLOCK_BINS=next_pow2(top_k + 1),
        )
    return groups.long(), nodes.long()


reference = moe_ops.reach


def make_inputs(seed: int, num_tokens=40, top_k=4, num_experts=32, num_groups=4, topk_group=2, slots_per_rank=10,
                gpus_per_node=2, ep_size=4, drop_fraction=0.1, device="cpu"):
    """Group-limited picks (or free ones with topk_group = num_groups), spread over random replicas."""
    g = torch.Generator().manual_seed(seed)
    scores = torch.rand(num_tokens, num_experts, generator=g)
    _, ids = moe_ops.grouped_topk(scores, torch.zeros(num_experts), num_groups, topk_group, top_k, 1.0)
    num_slots = slots_per_rank * ep_size
    slot_of = torch.randint(0, num_slots, (num_experts,), generator=g)  # a slot holding each expert
    slots = slot_of[ids]
    drop = torch.rand(num_tokens, top_k, generator=g) < drop_fraction
    ids, slots = ids.masked_fill(drop, -1), slots.masked_fill(drop, -1)
    slots_per_node = slots_per_rank * min(gpus_per_node, ep_size)
    return (ids.to(device), slots.to(device), num_experts // num_groups, num_groups, slots_per_node,
            -(-num_slots // slots_per_node))
