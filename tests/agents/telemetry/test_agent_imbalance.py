"""The per-rank GPU imbalance estimate behind moectl_expert_gpu_load_max_to_mean_ratio."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from agents.runtime.placement import Placement
from agents.telemetry.imbalance import gpu_load_ratio


def test_replicas_split_the_hot_expert_and_even_the_gpus():
    tokens = np.array([[300.0, 100.0, 100.0, 100.0]])  # expert 0 is hot
    alone = Placement(torch.tensor([[0, 1, 2, 3]]))  # 2 GPUs x 2 slots: 400 vs 200
    assert gpu_load_ratio(tokens, alone, ep_size=2) == pytest.approx(400 / 300)
    replicated = Placement(torch.tensor([[0, 1, 0, 2, 3, 1]]))  # 3 GPUs x 2 slots
    # expert 0 split 150/150, expert 1 50/50: GPUs carry 200, 250, 150
    assert gpu_load_ratio(tokens, replicated, ep_size=3) == pytest.approx(250 / 200)
    shared = Placement(torch.tensor([[0, 1, 0, 2, 3, 1]]), slot_share=torch.tensor([[2.0, 1, 1, 1, 1, 1]]))
    # expert 0 split 200/100: GPUs carry 250, 200, 150
    assert gpu_load_ratio(tokens, shared, ep_size=3) == pytest.approx(250 / 200)


def test_nothing_routed_is_unknown_not_balanced():
    assert gpu_load_ratio(np.zeros((2, 4)), Placement(torch.tensor([[0, 1, 2, 3]] * 2)), ep_size=2) is None
