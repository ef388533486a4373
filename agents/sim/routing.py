"""What a group limit does to the tokens of a simulated window: routed like the real router, on a sample.

Each sampled token scores every expert with its popularity plus Gumbel noise (so its top-k is a draw
from the popularity, as the load model's counts are), then routes group-limited as DeepSeek-V3 does
(agents/runtime/moe_ops.py): keep the `limit` groups with the best sum of their top-2 scores, take the
top-k experts inside them. From the picks: how many groups, GPUs and nodes a token reaches (its home
GPU drawn at random: attention is data parallel), and how many of its experts the limit kept, against
the unconstrained top-k (what agents report as routing recall) and against the model's own limit (what
the model was trained with: routing away from it costs quality, here MTP acceptance).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from agents.sim.cost import Traffic

MAX_SAMPLED_TOKENS = 512  # per layer: enough for means to 1-2%, cheap enough for every window
# spread of a token's preference for some groups over others (log scale): a router trained group-limited
# may send each token's experts to a few groups it favours. 0 (none) gives the bundled model's recall: 0.78
# of the unconstrained top-4 at topk_group 2 of 4 (0.79 measured, agents/runtime/README.md)
GROUP_AFFINITY = 0.0


@dataclass(frozen=True)
class RoutingSample:
    """Means per token over the sampled tokens and layers."""

    groups_reached: float
    off_gpu_rows: float  # of its top_k rows, those computed on another GPU
    remote_nodes: float  # other nodes it reaches: one copy of the token crosses the network to each
    recall: float  # share of the unconstrained top-k the limited router kept
    model_recall: float  # share of the picks under the model's own limit the limited router kept

    def traffic(self, top_k: int) -> Traffic:
        return Traffic(self.off_gpu_rows / top_k, self.remote_nodes / top_k)

    @property
    def quality(self) -> float:
        """What routing away from the model's own limit leaves of its speculation: the MTP module drafts
        from hidden states the model was trained to produce with its own experts."""
        return self.model_recall


def expert_to_gpu(slot_to_expert: np.ndarray, num_experts: int, slots_per_rank: int) -> np.ndarray:
    """[num_layers, num_slots] placement -> [num_layers, num_experts] the GPU of each expert's first slot."""
    gpu = np.zeros((slot_to_expert.shape[0], num_experts), dtype=np.int64)
    for layer, row in enumerate(slot_to_expert):
        slots = np.arange(len(row))[::-1]  # assigning in reverse leaves the first slot's rank
        gpu[layer, row[slots]] = slots // slots_per_rank
    return gpu


def _limited_topk(scores: np.ndarray, num_groups: int, limit: int, top_k: int) -> np.ndarray:
    """scores [T, E] -> [T, top_k] expert ids, keeping only each token's best `limit` groups."""
    num_tokens, num_experts = scores.shape
    if limit < num_groups:
        grouped = scores.reshape(num_tokens, num_groups, num_experts // num_groups)
        top2 = np.sort(grouped, axis=2)[:, :, -2:].sum(axis=2)  # [T, G]
        dropped = np.argsort(-top2, axis=1)[:, limit:]
        mask = np.zeros((num_tokens, num_groups), dtype=bool)
        np.put_along_axis(mask, dropped, True, axis=1)
        scores = np.where(np.repeat(mask, num_experts // num_groups, axis=1), -np.inf, scores)
    return np.argpartition(-scores, top_k - 1, axis=1)[:, :top_k]


def _kept(picks: np.ndarray, reference: np.ndarray) -> float:
    """Share of `reference`'s picks ([T, K] each) that `picks` holds too."""
    return float((picks[:, :, None] == reference[:, None, :]).any(axis=2).mean())


def sample_routing(popularity: np.ndarray, *, top_k: int, num_groups: int, limit: int | None,
                   model_limit: int | None, expert_to_gpu: np.ndarray, gpus_per_node: int,
                   rng: np.random.Generator, num_tokens: int = MAX_SAMPLED_TOKENS,
                   group_affinity: float = GROUP_AFFINITY) -> RoutingSample:
    """popularity: [num_layers, num_experts], rows sum to 1; expert_to_gpu: [num_layers, num_experts] the GPU
    (EP rank) holding each expert (its first replica); limit/model_limit: groups per token, None: every group."""
    num_layers, num_experts = popularity.shape
    ep_size = int(expert_to_gpu.max()) + 1
    group_of = np.arange(num_experts) // (num_experts // num_groups)
    stats = np.zeros(5)
    for layer in range(num_layers):
        affinity = rng.normal(0.0, group_affinity, (num_tokens, num_groups))[:, group_of]  # [T, E]
        scores = np.log(np.maximum(popularity[layer], 1e-12)) + rng.gumbel(size=(num_tokens, num_experts)) + affinity
        picks = _limited_topk(scores, num_groups, limit or num_groups, top_k)
        free = _limited_topk(scores, num_groups, num_groups, top_k)
        own = _limited_topk(scores, num_groups, model_limit or num_groups, top_k)
        gpu = expert_to_gpu[layer][picks]  # [T, K]
        home = rng.integers(0, ep_size, num_tokens)
        node, home_node = gpu // gpus_per_node, home // gpus_per_node
        nodes = np.sort(node, axis=1)
        distinct = np.concatenate([np.ones((num_tokens, 1), bool), nodes[:, 1:] != nodes[:, :-1]], axis=1)
        reached_home = (node == home_node[:, None]).any(axis=1)
        groups = np.sort(group_of[picks], axis=1)
        stats += [(1 + (groups[:, 1:] != groups[:, :-1]).sum(axis=1)).mean(), (gpu != home[:, None]).sum(1).mean(),
                  (distinct.sum(axis=1) - reached_home).mean(), _kept(picks, free), _kept(picks, own)]
    return RoutingSample(*(stats / num_layers))
