"""A step-time model for one EP group: the most loaded GPU sets the pace of every MoE layer.

Numbers are for an H800-class GPU serving a DeepSeek-V3-like layer; they only need to move the
right way with load, imbalance and the traffic that crosses GPUs. The simulated engine (per step)
and the simulated fleet (per window) both time their work here.

The all-to-all is priced per row that arrives from another GPU, and `remote_share` says how many
rows that is: today from the EP size and the groups a token may reach under a group limit. Pricing
rows by the link they cross (NVLink inside a node, the network between nodes) extends
`remote_share` into one share per link, each with its own seconds per row.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

DENSE_SECONDS_PER_TOKEN = 6.0e-6  # attention + shared expert, per token and MoE layer, on the token's own rank
EXPERT_SECONDS_PER_ROW = 2.0e-6  # routed-expert GEMMs per token-expert row on one GPU
ALL2ALL_SECONDS_PER_ROW = 0.4e-6  # per row a GPU receives from another GPU, dispatch and combine each


@dataclass(frozen=True)
class StepTimes:
    forward_seconds: float
    dispatch_seconds: float
    combine_seconds: float


def step_times(gpu_rows: np.ndarray, num_tokens: float, remote_share: float) -> StepTimes:
    """The seconds one rank spends on `num_tokens` tokens, every layer waiting for its busiest GPU.

    gpu_rows: [num_layers, ep_size] token-expert rows each GPU computes over the same span (a step or a
    window); num_tokens: tokens through this rank's dense layers (attention is data parallel);
    remote_share: the share of a GPU's rows that arrive from another GPU (`remote_share` below).
    """
    busiest = float(gpu_rows.max(axis=1).sum())
    dispatch = combine = ALL2ALL_SECONDS_PER_ROW * busiest * remote_share
    dense = DENSE_SECONDS_PER_TOKEN * num_tokens * gpu_rows.shape[0]
    return StepTimes(dense + EXPERT_SECONDS_PER_ROW * busiest + dispatch + combine, dispatch, combine)


def groups_touched(topk_group: int, num_groups: int, top_k: int) -> float:
    """Expected expert groups (≈ nodes) one token's top_k experts span, capped by the routing limit."""
    free = num_groups * (1.0 - (1.0 - 1.0 / num_groups) ** top_k)
    return min(float(topk_group), free)


def routing_effect(topk_group: int | None, num_groups: int, top_k: int) -> tuple[float, float]:
    """(all-to-all traffic factor vs unlimited routing, routing recall) under a group limit.

    Traffic scales with the groups a token reaches; recall falls faster the tighter the limit,
    as the limited router must swap more of a token's best experts for second-best ones.
    """
    free = groups_touched(num_groups, num_groups, top_k)
    factor = groups_touched(topk_group or num_groups, num_groups, top_k) / free
    return factor, 1.0 - 0.5 * (1.0 - factor) ** 1.5


def remote_share(ep_size: int, topk_group: int | None, num_groups: int, top_k: int) -> float:
    """Share of the rows a GPU computes that arrive from another GPU: with experts spread over the group,
    1 - 1/ep_size of a token's rows leave its GPU, fewer when a group limit keeps the token to fewer
    groups. 0 for one rank: nothing to exchange."""
    return (1.0 - 1.0 / ep_size) * routing_effect(topk_group, num_groups, top_k)[0]
