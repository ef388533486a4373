"""The simulated engine counts the groups and nodes its tokens reach as the runtime does: within the limit
it runs, past it when the limit is bypassed, over the nodes the placement puts the chosen replicas on."""

from __future__ import annotations

import numpy as np
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
        return sample_reach(popularity, 500, np.random.default_rng(0), routing)[1].sum(0)

    spread = nodes(1)  # a token's 4 experts, in 2 groups of 8 experts on 10-slot ranks: 2 or 3 ranks mostly
    assert spread[2:].sum() > 0.5 * spread.sum() and spread[0] == 0
    assert nodes(4)[2:].sum() == 0  # one node holds every rank
