"""The groups and nodes simulated tokens reach: the simulator's model of group-limited routing.

Each token's affinities are drawn around its layer's popularity (Gumbel noise on the log, so a token's
top-k is a draw of k experts without replacement), routed by the runtime's own group-limited top-k,
spread over the replicas of the placement and counted as the runtime counts them
(agents/runtime/moe_ops.py `reach`). The simulated engine samples every step; the simulated fleet a
bounded sample of each window.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from agents.runtime import moe_ops


@dataclass(frozen=True)
class Routing:
    """How one simulated EP group routes: the model's groups and the limit it runs with, and where slots live.

    expert_to_slots, cum_share: [num_layers, num_experts, max_replicas] (agents/runtime/placement.py
    `routing_tables` of the placement in force)."""

    num_groups: int
    top_k: int
    topk_group: int  # groups a token may reach; num_groups when the limit is bypassed
    expert_to_slots: Tensor
    cum_share: Tensor
    slots_per_rank: int
    gpus_per_node: int
    ep_size: int


def sample_reach(popularity: np.ndarray, num_tokens: int, rng: np.random.Generator,
                 routing: Routing) -> tuple[Tensor, Tensor]:
    """popularity: [num_layers, num_experts] rows summing to 1 -> ([num_layers, top_k + 1], same) of
    `num_tokens` drawn tokens by the distinct groups and nodes their top-k reached."""
    r = routing
    num_layers, num_experts = popularity.shape
    slots_per_node = r.slots_per_rank * min(r.gpus_per_node, r.ep_size)
    num_nodes = -(-r.slots_per_rank * r.ep_size // slots_per_node)
    logits = np.log(popularity)[:, None, :] + rng.gumbel(size=(num_layers, num_tokens, num_experts))
    scores = torch.sigmoid(torch.from_numpy(logits.reshape(-1, num_experts)))  # [L * T, E], layers stacked
    bias = torch.zeros(num_experts, dtype=scores.dtype)
    _, ids = moe_ops.grouped_topk(scores, bias, r.num_groups, r.topk_group, r.top_k, 1.0)  # [L * T, K]
    # one lookup for all layers: expert e of layer l is row l * E + e of the stacked tables
    offset = torch.arange(num_layers).repeat_interleave(num_tokens)[:, None] * num_experts
    slots = moe_ops.select_slots(ids + offset, r.expert_to_slots.flatten(0, 1), r.cum_share.flatten(0, 1))
    groups, nodes = [], []
    for layer in range(num_layers):
        rows = slice(layer * num_tokens, (layer + 1) * num_tokens)
        g, n = moe_ops.reach(ids[rows], slots[rows], num_experts // r.num_groups, r.num_groups, slots_per_node,
                             num_nodes)
        groups.append(g)
        nodes.append(n)
    return torch.stack(groups), torch.stack(nodes)
