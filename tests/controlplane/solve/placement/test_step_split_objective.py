"""The placement objective of pools that run the dispatch-time split: the per-step LP optimum over sampled steps."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
from support.loads import zipf_load

from controlplane.desired import Decision
from controlplane.plan.placement import plan_placement
from controlplane.solve.placement.algorithm import MigrationAware
from controlplane.solve.placement.step_split import (
    PEAK_Z,
    STEP_SPLIT,
    WINDOW_MEAN,
    sampled_steps,
    solve_for_split,
    step_split_imbalance,
)
from controlplane.solve.placement.topology import Topology
from tests.controlplane.plan.test_plan_placement import AUTO, EP, pool

TOPOLOGY = Topology(num_nodes=1, gpus_per_node=8, slots_per_gpu=9)


def window_load(seed: int) -> np.ndarray:
    """[4, 64] a window's tokens."""
    return zipf_load(4, 64, 0.7, seed, scale=1e6)


def test_the_split_objective_is_never_worse_than_the_window_mean_plan_on_its_steps():
    for seed in range(3):
        load = window_load(seed)
        plan = solve_for_split(MigrationAware(), load, TOPOLOGY, step_tokens=1536)
        mean_plan = MigrationAware().solve(load, TOPOLOGY)
        assert plan.objective == STEP_SPLIT and mean_plan.objective == WINDOW_MEAN
        assert mean_plan.step_imbalance is None
        steps = sampled_steps(load, 1536)
        assert plan.step_imbalance == step_split_imbalance(plan.slot_to_expert, plan.slot_share, steps, 8)
        assert plan.step_imbalance <= step_split_imbalance(mean_plan.slot_to_expert, mean_plan.slot_share, steps, 8)
        assert plan.step_imbalance >= 1.0 and PEAK_Z[0] == 0.0  # the window-mean plan is one of the candidates
        np.testing.assert_allclose(plan.slot_share.reshape(4, -1).sum(1), np.full(4, 64.0))  # shares still sum to 1


def test_a_pool_whose_ranks_route_by_the_split_is_planned_for_its_steps():
    state = pool()
    plain = plan_placement(AUTO, state, now=1000.0)
    assert plain.inputs["objective"] == WINDOW_MEAN and "forecast_step_imbalance" not in plain.inputs
    tokens = float(state.windows[-1].expert_tokens.sum())
    routed = {"num_steps": 10.0 * EP, "step_mean_tokens": tokens, "step_split_max_tokens": 1.3 * tokens,
              "step_shares_max_tokens": 1.5 * tokens, "step_bound_max_tokens": 1.2 * tokens,
              "step_split_routed_mean_tokens": tokens}
    windows = tuple(replace(w, counters=w.counters | routed) for w in state.windows)
    plan = plan_placement(AUTO, replace(state, windows=windows), now=1000.0)
    assert plan.decision == Decision.rebalance, plan.reason
    assert plan.inputs["objective"] == STEP_SPLIT and plan.inputs["forecast_step_imbalance"] >= 1.0
