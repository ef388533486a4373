"""The dispatch-time split's sweeps in one launch: twin of `agents.runtime.replica_split.balance_split`.

One program per row (an MoE layer's step) keeps the row's GPU loads in registers ([BLOCK_G]). It runs every sweep
over the replicated experts in-kernel, so a step pays one launch per layer instead of a few torch ops per expert
and sweep (host-bound on a GPU). An expert's block step takes its tokens off its GPUs. It finds the water level T
as the smallest integer with sum(max(0, T - level)) >= tokens, by bisection. The torch twin sorts; both give the
same T, so the same integers. It fills every bin to T - 1 and hands the remainder out one token each, first bins
first. The fixed-share start is the torch twin's (`fixed_split`), computed before the launch.
"""

import torch
import triton
import triton.language as tl
from torch import Tensor

from agents.runtime import replica_split
from agents.runtime.kernels._common import next_pow2
from agents.runtime.placement import Placement

NUM_BISECTIONS = 40  # T - min level <= tokens < 2**40 per expert and step


@triton.jit
def _sweep_kernel(
    load_ptr,  # [B, E] int64 tokens per expert
    gpus_ptr,  # [B, E, R] int64 GPU of each replica, -1 none
    tokens_ptr,  # [B, E, R] int64 in: fixed split; out: the split
    gpu_load_ptr,  # [B, G] int64 in: the fixed split's GPU loads
    replicated_ptr,  # [num_replicated] int64 experts to sweep
    num_replicated,
    num_sweeps,
    num_experts,
    num_replicas,
    num_gpus,
    BLOCK_R: tl.constexpr,
    BLOCK_G: tl.constexpr,
    NUM_BISECT: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    g = tl.arange(0, BLOCK_G)
    r = tl.arange(0, BLOCK_R)
    loads = tl.load(gpu_load_ptr + row * num_gpus + g, mask=g < num_gpus, other=0)  # [BLOCK_G]
    for _ in range(num_sweeps):
        for i in range(num_replicated):
            expert = tl.load(replicated_ptr + i)
            base = (row * num_experts + expert) * num_replicas
            gpus = tl.load(gpus_ptr + base + r, mask=r < num_replicas, other=-1)  # [BLOCK_R]
            valid = gpus >= 0
            current = tl.load(tokens_ptr + base + r, mask=valid, other=0)
            on_gpu = (gpus[:, None] == g[None, :]) & valid[:, None]  # [BLOCK_R, BLOCK_G]
            loads -= tl.sum(tl.where(on_gpu, current[:, None], 0), axis=0)
            level = tl.sum(tl.where(on_gpu, loads[None, :], 0), axis=1)  # [BLOCK_R] others' load on its GPUs
            count = tl.load(load_ptr + row * num_experts + expert)
            big = tl.full([BLOCK_R], 1 << 62, tl.int64)
            lowest = tl.min(tl.where(valid, level, big), axis=0)
            lo = lowest  # the answer T is in [lowest, lowest + count]
            hi = lowest + count
            for _b in range(NUM_BISECT):
                mid = (lo + hi) // 2
                poured = tl.sum(tl.where(valid, tl.maximum(mid - level, 0), 0), axis=0)
                is_enough = poured >= count
                hi = tl.where(is_enough, mid, hi)
                lo = tl.where(is_enough, lo, mid + 1)
            top = hi
            fill = tl.where(valid, tl.maximum(top - 1 - level, 0), 0)
            rest = count - tl.sum(fill, axis=0)
            at_edge = valid & (level <= top - 1)
            fill += (at_edge & (tl.cumsum(at_edge.to(tl.int64), axis=0) <= rest)).to(tl.int64)
            loads += tl.sum(tl.where(on_gpu, fill[:, None], 0), axis=0)
            tl.store(tokens_ptr + base + r, fill, mask=r < num_replicas)


def triton_impl(expert_load: Tensor, expert_to_gpus: Tensor, gpu_share: Tensor, num_gpus: int,
                num_sweeps: int = replica_split.NUM_SWEEPS, replicated: list[int] | None = None) -> Tensor:
    """Same signature and integers as `agents.runtime.replica_split.balance_split`: [B, E] -> [B, E, R] int64."""
    tokens = replica_split.fixed_split(expert_load, gpu_share).contiguous()
    gpu_load = replica_split.gpu_load_of(tokens, expert_to_gpus, num_gpus).contiguous()
    replicated = replica_split.replicated_experts(expert_to_gpus) if replicated is None else replicated
    if not replicated or num_sweeps < 1:
        return tokens
    experts = torch.tensor(replicated, dtype=torch.int64, device=tokens.device)
    num_rows, num_experts, num_replicas = tokens.shape
    _sweep_kernel[(num_rows,)](
        expert_load.to(torch.int64).contiguous(), expert_to_gpus.to(torch.int64).contiguous(), tokens, gpu_load,
        experts, len(replicated), num_sweeps, num_experts, num_replicas, num_gpus,
        BLOCK_R=max(2, next_pow2(num_replicas)), BLOCK_G=max(16, next_pow2(num_gpus)), NUM_BISECT=NUM_BISECTIONS,
    )
    return tokens


reference = replica_split.balance_split


def make_inputs(seed: int, num_gpus=4, slots_per_gpu=10, num_experts=32, num_rows=2, max_count=200, device="cpu"):
    """Random placements (every expert once, the rest of the slots replicas) and step counts, 15% zero."""
    gen = torch.Generator().manual_seed(seed)
    num_slots = num_gpus * slots_per_gpu
    rows = []
    for _ in range(num_rows):
        row = torch.cat([torch.randperm(num_experts, generator=gen),
                         torch.randint(0, num_experts, (num_slots - num_experts,), generator=gen)])
        rows.append(row[torch.randperm(num_slots, generator=gen)])
    shares = torch.rand(num_rows, num_slots, generator=gen, dtype=torch.float64) + 0.1
    gpus, share, _ = Placement(torch.stack(rows), shares).replica_gpu_tables(num_experts, num_gpus)
    counts = torch.randint(0, max_count, (num_rows, num_experts), generator=gen)
    counts *= torch.rand(num_rows, num_experts, generator=gen) < 0.85
    return counts.to(device), gpus.to(device), share.to(device), num_gpus
