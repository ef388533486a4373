"""The simulator's routing (agents/sim/reach.py) counts the groups and nodes its tokens reach as the runtime does:
within the limit it runs, past it when the limit is bypassed, over the nodes the placement puts the chosen replicas
on; a tighter limit reaches fewer groups and nodes and keeps fewer of the experts the model picks on its own."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from support.ranks import sim_config

from agents.runtime.placement import EngineRoutingLimits, Placement
from agents.sim.engine import SimEngine
from agents.sim.load import LoadModel
from agents.sim.reach import Routing, sample_reach


def reached(engine: SimEngine, num_steps: int = 4) -> tuple[torch.Tensor, torch.Tensor, float]:
    """([top_k + 1] groups, [top_k + 1] nodes) over the steps and layers, and the last step's recall."""
    groups = nodes = 0
    for _ in range(num_steps):
        _, stats = engine.step()
        groups, nodes = groups + stats.moe.groups_per_token.sum(0), nodes + stats.moe.nodes_per_token.sum(0)
        tokens = stats.num_scheduled_tokens * 4  # 4 layers
        assert stats.moe.groups_per_token.sum() == stats.moe.nodes_per_token.sum() == tokens
    return groups, nodes, float(stats.moe.recall_kept.sum() / stats.moe.recall_total.sum())


def test_tokens_stay_within_the_limit_in_force_and_reach_nodes_by_placement():
    engine = SimEngine(sim_config(0, 1, topk_group=2, gpus_per_node=1))
    groups, nodes, recall = reached(engine)
    assert groups[3:].sum() == 0 and groups[2] > 0 and nodes[2:].sum() == 0  # one rank: one node
    assert recall < 1
    engine.apply_routing_limits(EngineRoutingLimits(version=1, topk_group=1))
    groups, _, _ = reached(engine)
    assert groups[2:].sum() == 0


def test_a_bypassed_limit_shows_in_the_counters():
    groups, _, recall = reached(SimEngine(sim_config(0, 1, topk_group=2, is_group_limit_bypassed=True)))
    assert groups[3:].sum() > 0.3 * groups.sum() and recall == 1.0


def test_nodes_follow_the_ranks_holding_the_chosen_replicas():
    placement = Placement.default(4, 32, 40)  # 4 ranks x 10 slots; experts 0..7 also on rank 3's spare slots
    popularity = LoadModel(4, 32, 4, seed=1).popularity()

    def nodes(gpus_per_node: int) -> torch.Tensor:
        routing = Routing(4, 4, 2, *placement.routing_tables(32), slots_per_rank=10, gpus_per_node=gpus_per_node,
                          ep_size=4)
        return sample_reach(popularity, 500, np.random.default_rng(0), routing).nodes.sum(0)

    spread = nodes(1)  # a token's 4 experts, in 2 groups of 8 experts on 10-slot ranks: 2 or 3 ranks mostly
    assert spread[2:].sum() > 0.5 * spread.sum() and spread[0] == 0
    assert nodes(4)[2:].sum() == 0  # one node holds every rank


NUM_LAYERS, NUM_EXPERTS, NUM_GROUPS, TOP_K = 4, 64, 8, 8


def sample(limit: int, *, ep_size: int = 16, gpus_per_node: int = 2, group_affinity: float = 0.0):
    """(groups reached, remote nodes, recall, recall of the model's own picks) per token at `limit`, the model's
    own being 4 of 8 groups."""
    popularity = LoadModel(NUM_LAYERS, NUM_EXPERTS, TOP_K, seed=1).popularity()
    tables = Placement.default(NUM_LAYERS, NUM_EXPERTS, NUM_EXPERTS).routing_tables(NUM_EXPERTS)
    routing = Routing(NUM_GROUPS, TOP_K, limit, *tables, NUM_EXPERTS // ep_size, gpus_per_node, ep_size,
                      model_topk_group=4, group_affinity=group_affinity)
    r = sample_reach(popularity, 512, np.random.default_rng(0), routing)
    groups = float((r.groups.sum(0) * torch.arange(TOP_K + 1)).sum()) / r.num_tokens
    return groups, r.remote_nodes / r.num_tokens, r.recall(TOP_K), r.quality(TOP_K)


def test_a_tighter_limit_reaches_fewer_groups_and_nodes_and_keeps_less():
    samples = [sample(limit) for limit in (1, 2, 3, 4, 8)]
    for looser, tighter in zip(samples[1:], samples, strict=False):
        assert tighter[0] < looser[0] and tighter[1] < looser[1] and tighter[2] < looser[2]
    assert samples[0][0] == pytest.approx(1.0)
    assert samples[-1][2] == pytest.approx(1.0)
    assert samples[3][3] == pytest.approx(1.0)  # the model's own limit keeps its own picks
    assert samples[4][3] < 1.0  # looser than trained is not the model's routing either


def test_the_bundled_models_recall_at_its_own_limit():
    # 4 groups of 8, top-4, topk_group 2: 0.79 of the unconstrained top-4 measured (agents/runtime/README.md)
    popularity = LoadModel(3, 32, 4, seed=0).popularity()
    routing = Routing(4, 4, 2, *Placement.default(3, 32, 32).routing_tables(32), 16, 8, 2, model_topk_group=2)
    r = sample_reach(popularity, 512, np.random.default_rng(0), routing)
    assert r.recall(4) == pytest.approx(0.79, abs=0.04) and r.quality(4) == 1.0
    assert r.remote_nodes == 0  # one node: nothing crosses the network


def test_group_affinity_keeps_a_tokens_experts_in_fewer_groups():
    assert sample(8, group_affinity=2.0)[0] < sample(8)[0] - 0.5


def test_samples_pool_by_adding():
    routing = Routing(4, 4, 2, *Placement.default(3, 32, 32).routing_tables(32), 16, 8, 2)
    popularity = LoadModel(3, 32, 4, seed=0).popularity()
    a, b = (sample_reach(popularity, n, np.random.default_rng(n), routing, home_rank=0) for n in (10, 30))
    both = a + b
    assert both.num_tokens == 3 * 40 and both.groups.sum() == 3 * 40
    assert both.recall(4) == pytest.approx((a.kept_free + b.kept_free) / (3 * 40 * 4))
