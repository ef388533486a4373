"""Token permutation by slot, twin of `moe_ops.permute`: align's counting sort with block 1, dropped last."""

import torch
from torch import Tensor

from agents.runtime import moe_ops
from agents.runtime.kernels.align import sort_by_bin


def triton_impl(slot_ids: Tensor, num_slots: int) -> tuple[Tensor, Tensor]:
    """slot_ids [T, K] (-1 dropped) -> order [N] int64 (flat assignment index grouped by slot, stable, dropped
    last), counts [S] int64."""
    order, _, _, counts = sort_by_bin(slot_ids, num_slots, 1, keep_dropped=True, out_dtype=torch.int64)
    return order, counts[:num_slots].long()


reference = moe_ops.permute


def make_inputs(seed: int, num_tokens=40, top_k=4, num_slots=16, drop_fraction=0.1, one_bin=None, device="cpu"):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, num_slots, (num_tokens, top_k), generator=g)
    if one_bin is not None:
        ids.fill_(one_bin)  # every assignment on one expert
    ids[torch.rand(num_tokens, top_k, generator=g) < drop_fraction] = -1
    return ids.to(device), num_slots
