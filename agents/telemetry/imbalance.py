"""The straggler factor a rank can see on its own: its routed load spread over the group's GPUs."""

from __future__ import annotations

import numpy as np

from agents.protocol.placement import PlacementTable
from agents.runtime.placement import Placement


def gpu_load_ratio(expert_tokens: np.ndarray, placement: Placement, ep_size: int) -> float | None:
    """Busiest GPU over the mean GPU, mean over MoE layers, if every rank routed like this one.

    expert_tokens: [num_layers, num_experts] tokens this rank routed in a window. Attention is data
    parallel, so each rank's routing is a sample of the group's: this estimate needs no other rank's
    numbers, which keeps it a plain per-rank gauge (no per-GPU series). The imbalance is the protocol's
    (agents/protocol/placement.py), the controller's for the same load; None when nothing was routed,
    and the gauge then keeps its last value.
    """
    share = placement.slot_share.numpy() if placement.slot_share is not None else None
    table = PlacementTable(placement.slot_to_expert.numpy(), share, placement.version)
    return table.imbalance(expert_tokens, ep_size)
