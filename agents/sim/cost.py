"""A step-time model for one EP group: the most loaded GPU sets the pace of every MoE layer.

Numbers are for an H800-class GPU serving a DeepSeek-V3-like layer; they only need to move the
right way with load and imbalance.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

EXPERT_SECONDS_PER_TOKEN = 2.0e-6  # routed-expert GEMMs per token-slot on one GPU
DENSE_SECONDS_PER_TOKEN = 6.0e-6  # attention + shared expert, data parallel across ranks
ALL2ALL_SECONDS_PER_TOKEN = 0.4e-6  # per token-expert pair received, dispatch and combine each


@dataclass(frozen=True)
class StepTimes:
    forward_seconds: float
    dispatch_seconds: float
    combine_seconds: float


def window_times(gpu_load: np.ndarray, num_tokens: int, ep_size: int, all2all_factor: float = 1.0) -> StepTimes:
    """gpu_load: [num_layers, ep_size] token-expert pairs per GPU over the window.

    Returns the seconds one rank spent: every layer waits for its busiest GPU.
    """
    busiest = gpu_load.max(axis=1).sum()
    dense = DENSE_SECONDS_PER_TOKEN * num_tokens / ep_size * gpu_load.shape[0]
    dispatch = ALL2ALL_SECONDS_PER_TOKEN * busiest * all2all_factor
    combine = ALL2ALL_SECONDS_PER_TOKEN * busiest * all2all_factor
    forward = dense + EXPERT_SECONDS_PER_TOKEN * busiest + dispatch + combine
    return StepTimes(forward, dispatch, combine)


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
