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


def window_times(gpu_load: np.ndarray, num_tokens: int, ep_size: int) -> StepTimes:
    """gpu_load: [num_layers, ep_size] token-expert pairs per GPU over the window.

    Returns the seconds one rank spent: every layer waits for its busiest GPU.
    """
    busiest = gpu_load.max(axis=1).sum()
    dense = DENSE_SECONDS_PER_TOKEN * num_tokens / ep_size * gpu_load.shape[0]
    dispatch = ALL2ALL_SECONDS_PER_TOKEN * busiest
    combine = ALL2ALL_SECONDS_PER_TOKEN * busiest
    forward = dense + EXPERT_SECONDS_PER_TOKEN * busiest + dispatch + combine
    return StepTimes(forward, dispatch, combine)
