"""Simulated routing (agents/sim/routing.py): tokens routed group-limited like the real router, so a tighter
limit reaches fewer groups and nodes and keeps fewer of the experts the model picks on its own."""

from __future__ import annotations

import numpy as np
import pytest

from agents.protocol.placement import default_slot_to_expert
from agents.sim.load import LoadModel
from agents.sim.routing import expert_to_gpu, sample_routing

NUM_LAYERS, NUM_EXPERTS, NUM_GROUPS, TOP_K = 4, 64, 8, 8


def sample(limit, *, ep_size=16, gpus_per_node=2, group_affinity=0.0, seed=0):
    popularity = LoadModel(NUM_LAYERS, NUM_EXPERTS, TOP_K, seed=1).popularity()
    table = default_slot_to_expert(NUM_LAYERS, NUM_EXPERTS, NUM_EXPERTS)
    return sample_routing(popularity, top_k=TOP_K, num_groups=NUM_GROUPS, limit=limit, model_limit=4,
                          expert_to_gpu=expert_to_gpu(table, NUM_EXPERTS, NUM_EXPERTS // ep_size),
                          gpus_per_node=gpus_per_node, rng=np.random.default_rng(seed),
                          group_affinity=group_affinity)


def test_a_tighter_limit_reaches_fewer_groups_and_nodes_and_keeps_less():
    samples = [sample(limit) for limit in (1, 2, 3, 4, 8)]
    for looser, tighter in zip(samples[1:], samples, strict=False):
        assert tighter.groups_reached < looser.groups_reached
        assert tighter.remote_nodes < looser.remote_nodes
        assert tighter.recall < looser.recall
    assert samples[0].groups_reached == pytest.approx(1.0)
    assert samples[-1].recall == pytest.approx(1.0)
    assert samples[3].model_recall == pytest.approx(1.0)  # the model's own limit keeps its own picks
    assert samples[4].model_recall < 1.0  # looser than trained is not the model's routing either


def test_the_bundled_models_recall_at_its_own_limit():
    # 4 groups of 8, top-4, topk_group 2: 0.79 of the unconstrained top-4 measured (agents/runtime/README.md)
    popularity = LoadModel(3, 32, 4, seed=0).popularity()
    table = default_slot_to_expert(3, 32, 32)
    s = sample_routing(popularity, top_k=4, num_groups=4, limit=2, model_limit=2,
                       expert_to_gpu=expert_to_gpu(table, 32, 16), gpus_per_node=8, rng=np.random.default_rng(0))
    assert s.recall == pytest.approx(0.79, abs=0.04)
    assert s.remote_nodes == 0  # one node: nothing crosses the network


def test_group_affinity_keeps_a_tokens_experts_in_fewer_groups():
    assert sample(8, group_affinity=2.0).groups_reached < sample(8).groups_reached - 0.5


def test_expert_to_gpu_takes_each_experts_first_slot():
    table = np.array([[3, 0, 1, 2, 3, 0]])  # 3 ranks of 2 slots: expert 3 on ranks 0 and 2
    np.testing.assert_array_equal(expert_to_gpu(table, 4, 2), [[0, 1, 1, 0]])
