"""The placement value both sides import, and the runtime's torch tables pinned to it."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from agents.protocol import PlacementTable, default_slot_to_expert
from agents.protocol.placement import effective_share, imbalance, layer_imbalance, replica_counts
from agents.runtime.placement import Placement


def test_imbalance_is_max_over_mean_per_layer_averaged_over_loaded_layers():
    placement = PlacementTable(np.array([[0, 1], [0, 1], [1, 0]]))  # 2 GPUs x 1 slot
    load = np.array([[3.0, 1.0], [0.0, 0.0], [2.0, 2.0]])
    gpu_load = placement.gpu_load(load, 2)
    np.testing.assert_allclose(gpu_load, load)
    np.testing.assert_array_equal(np.isnan(layer_imbalance(gpu_load)), [False, True, False])
    # the layer without load has no straggler and is left out of the mean, not counted as 1.0
    assert placement.imbalance(load, 2) == imbalance(gpu_load) == pytest.approx((1.5 + 1.0) / 2)
    assert placement.imbalance(np.zeros_like(load), 2) is None


def test_gpu_load_splits_an_expert_over_its_replicas_by_share():
    tokens = np.array([[300.0, 100.0, 100.0, 100.0]])
    table = np.array([[0, 1, 0, 2, 3, 1]])  # 3 GPUs x 2 slots; experts 0 and 1 twice
    even = PlacementTable(table)
    np.testing.assert_array_equal(even.replica_counts(4), [[2, 2, 1, 1]])
    np.testing.assert_allclose(even.gpu_load(tokens, 3), [[200.0, 250.0, 150.0]])
    assert even.imbalance(tokens, 3) == pytest.approx(250 / 200)
    # weights are normalised over an expert's replicas: 2:1 for expert 0 is 200/100
    weighted = PlacementTable(table, np.array([[2.0, 1, 1, 1, 1, 1]]))
    np.testing.assert_allclose(weighted.gpu_load(tokens, 3), [[250.0, 200.0, 150.0]])
    with pytest.raises(ValueError, match="do not split evenly"):
        even.gpu_load(tokens, 4)
    with pytest.raises(ValueError, match="non-negative"):
        PlacementTable(table, -np.ones((1, 6)))


def test_an_expert_whose_shares_sum_to_zero_splits_evenly():
    share = effective_share(np.array([[0, 0, 1]]), np.array([[0.0, 0.0, 5.0]]), 2)
    np.testing.assert_allclose(share, [[0.5, 0.5, 1.0]])


@pytest.mark.parametrize("shape", [(1, 4, 4), (3, 8, 12), (58, 256, 288), (2, 5, 16)])
def test_the_runtimes_version_0_table_is_the_protocols(shape):
    """The runtime may not import the protocol, so it keeps its own default; this pins the two equal."""
    runtime = Placement.default(*shape)
    np.testing.assert_array_equal(runtime.slot_to_expert.numpy(), default_slot_to_expert(*shape))
    np.testing.assert_array_equal(PlacementTable.default(*shape).slot_to_expert, default_slot_to_expert(*shape))
    assert runtime.version == PlacementTable.default(*shape).version == 0


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 3), st.integers(1, 6), st.integers(1, 4), st.booleans(), st.integers(0, 2**32 - 1))
def test_the_runtime_routes_by_the_protocols_replicas_and_shares(num_layers, num_experts, extra, is_weighted, seed):
    """The runtime's router splits an expert's tokens as `effective_share` says (the agent's gauge and the
    controller's forecast assume exactly that split)."""
    rng = np.random.default_rng(seed)
    num_slots = num_experts + extra
    table = np.stack([rng.permutation(np.concatenate([np.arange(num_experts),
                                                      rng.integers(0, num_experts, extra)]))
                      for _ in range(num_layers)])
    share = rng.uniform(0.1, 3.0, table.shape) if is_weighted else None
    runtime = Placement(torch.from_numpy(table), None if share is None else torch.from_numpy(share))
    np.testing.assert_array_equal(runtime.expert_to_num_replicas(num_experts).numpy(),
                                  replica_counts(table, num_experts))
    expert_to_slots, cum_share = runtime.routing_tables(num_experts)  # [L, E, R] slots and cumulative shares
    routed = np.zeros((num_layers, num_slots))
    for layer in range(num_layers):
        for expert in range(num_experts):
            slots = expert_to_slots[layer, expert]
            slots = slots[slots >= 0].numpy()
            upper = np.minimum(cum_share[layer, expert, :len(slots)].double().numpy(), 1.0)
            routed[layer, slots] = np.diff(upper, prepend=0.0)
    np.testing.assert_allclose(routed, effective_share(table, share, num_experts), atol=1e-6)
