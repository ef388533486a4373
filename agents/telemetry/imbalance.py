"""The straggler factor a rank can see on its own: its routed load spread over the group's GPUs."""

from __future__ import annotations

import numpy as np

from agents.runtime.placement import Placement


def gpu_load_ratio(expert_tokens: np.ndarray, placement: Placement, ep_size: int) -> float | None:
    """Busiest GPU over the mean GPU, mean over MoE layers, if every rank routed like this one.

    expert_tokens: [num_layers, num_experts] tokens this rank routed in a window. Attention is data
    parallel, so each rank's routing is a sample of the group's: this estimate needs no other rank's
    numbers, which keeps it a plain per-rank gauge (no per-GPU series). None when nothing was routed.
    """
    num_layers, num_experts = expert_tokens.shape
    table = placement.slot_to_expert.numpy()  # [L, S]
    share = placement.slot_share.numpy() if placement.slot_share is not None else np.ones(table.shape)
    totals = placement.expert_share_sums(num_experts).numpy()  # [L, E]
    slot_load = np.take_along_axis(expert_tokens, table, axis=1) * share / np.take_along_axis(totals, table, axis=1)
    gpu_load = slot_load.reshape(num_layers, ep_size, -1).sum(axis=2)  # [L, G]
    means = gpu_load.mean(axis=1)
    loaded = means > 0
    if not loaded.any():
        return None
    return float((gpu_load[loaded].max(axis=1) / means[loaded]).mean())
