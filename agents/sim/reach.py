"""The groups, GPUs and nodes simulated tokens reach: the simulator's model of group-limited routing.

Each token's affinities are drawn around its layer's popularity (Gumbel noise on the log, so a token's
top-k is a draw of k experts without replacement; optionally a preference for some groups). The tokens are
routed by the runtime's own group-limited top-k, spread over the replicas of the placement and counted as the
runtime counts them (agents/runtime/moe_ops.py `reach`). The same tokens routed unconstrained and with the model's
own limit say how many of their experts the limit in force kept. That is measured against the unconstrained top-k
(what agents report as routing recall) and against the model's own picks. Routing away from what the model was
trained with costs quality, here MTP acceptance. The simulated engine samples every step; the fleet a bounded sample
of each window.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from agents.runtime import moe_ops
from agents.sim.cost import Traffic

# spread of a token's preference for some groups over others (log scale): a router trained group-limited may
# send each token's experts to a few groups it favours. 0 (none) gives the bundled model's recall: 0.78 of the
# unconstrained top-4 at topk_group 2 of 4 (0.79 measured, agents/runtime/README.md)
GROUP_AFFINITY = 0.0


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
    model_topk_group: int | None = None  # the limit the model was trained with; None: every group
    group_affinity: float = GROUP_AFFINITY


@dataclass(frozen=True)
class Reach:
    """What `num_tokens` sampled tokens reached, per layer: groups, nodes: [num_layers, top_k + 1] tokens by the
    distinct groups and nodes their top-k reached; the rest summed over tokens and layers (`+` pools samples)."""

    groups: Tensor
    nodes: Tensor
    num_tokens: int  # token-layers
    off_gpu_rows: float  # rows computed on another GPU than the token's own
    remote_nodes: float  # nodes other than the token's own (one network copy each)
    kept_free: float  # experts of the unconstrained top-k the limit kept
    kept_own: float  # experts the model's own limit picks that the limit kept

    def __add__(self, other: Reach) -> Reach:
        return Reach(self.groups + other.groups, self.nodes + other.nodes, self.num_tokens + other.num_tokens,
                     self.off_gpu_rows + other.off_gpu_rows, self.remote_nodes + other.remote_nodes,
                     self.kept_free + other.kept_free, self.kept_own + other.kept_own)

    def traffic(self, top_k: int) -> Traffic:
        rows = self.num_tokens * top_k
        return Traffic(self.off_gpu_rows / rows, self.remote_nodes / rows)

    def recall(self, top_k: int) -> float:
        return self.kept_free / (self.num_tokens * top_k)

    def quality(self, top_k: int) -> float:
        """What routing away from the model's own limit leaves of its speculation: the MTP module drafts
        from hidden states the model was trained to produce with its own experts."""
        return self.kept_own / (self.num_tokens * top_k)


def _kept(picks: Tensor, reference: Tensor) -> float:
    """How many of `reference`'s picks ([T, K] each) `picks` holds too, summed over tokens."""
    return float((picks[:, :, None] == reference[:, None, :]).any(dim=2).sum())


def sample_reach(popularity: np.ndarray, num_tokens: int, rng: np.random.Generator, routing: Routing,
                 home_rank: int | None = None) -> Reach:
    """popularity: [num_layers, num_experts] rows summing to 1; home_rank: the rank whose tokens these are
    (attention is data parallel); None: each token's drawn at random."""
    r = routing
    num_layers, num_experts = popularity.shape
    ranks_per_node = min(r.gpus_per_node, r.ep_size)
    slots_per_node = r.slots_per_rank * ranks_per_node
    num_nodes = -(-r.slots_per_rank * r.ep_size // slots_per_node)
    group_of = np.arange(num_experts) // (num_experts // r.num_groups)
    logits = np.log(popularity)[:, None, :] + rng.gumbel(size=(num_layers, num_tokens, num_experts))
    if r.group_affinity:
        logits += rng.normal(0.0, r.group_affinity, (num_layers, num_tokens, r.num_groups))[:, :, group_of]
    scores = torch.sigmoid(torch.from_numpy(logits.reshape(-1, num_experts)))  # [L * T, E], layers stacked
    bias = torch.zeros(num_experts, dtype=scores.dtype)

    def top(limit: int) -> Tensor:
        return moe_ops.grouped_topk(scores, bias, r.num_groups, limit, r.top_k, 1.0)[1]  # [L * T, K]

    ids = top(r.topk_group)
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
    home = torch.from_numpy(rng.integers(0, r.ep_size, len(ids))) if home_rank is None \
        else torch.full((len(ids),), home_rank)
    gpu = slots.div(r.slots_per_rank, rounding_mode="floor")  # [L * T, K]
    node, home_node = gpu.div(ranks_per_node, rounding_mode="floor"), home.div(ranks_per_node, rounding_mode="floor")
    is_home_node = node == home_node[:, None]
    distinct_nodes = sum(float((n * torch.arange(len(n))).sum()) for n in nodes)
    return Reach(torch.stack(groups), torch.stack(nodes), len(ids), float((gpu != home[:, None]).sum()),
                 distinct_nodes - float(is_home_node.any(dim=1).sum()), _kept(ids, top(r.num_groups)),
                 _kept(ids, top(r.model_topk_group or r.num_groups)))
