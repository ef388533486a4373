"""Invariants of solve_placement on random and degenerate shapes (hypothesis)."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agents.protocol.placement import PlacementTable, replica_counts
from controlplane.solve.placement.solver import solve_placement
from controlplane.solve.placement.topology import Topology

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def problems(draw):
    num_nodes = draw(st.integers(1, 3))
    gpus_per_node = draw(st.integers(1, 4))
    slots_per_gpu = draw(st.integers(1, 4))
    num_gpus = num_nodes * gpus_per_node
    num_slots = num_gpus * slots_per_gpu
    # slots >= experts, and no more slots than one replica of each expert per GPU
    num_experts = draw(st.integers(slots_per_gpu, num_slots))
    num_groups = draw(st.sampled_from([g for g in range(1, num_experts + 1) if num_experts % g == 0]))
    topology = Topology(num_nodes, gpus_per_node, slots_per_gpu, num_groups)
    num_layers = draw(st.integers(1, 3))
    shape = (num_layers, num_experts)
    kind = draw(st.sampled_from(["random", "zero", "one_hot", "zipf"]))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    if kind == "random":
        load = rng.uniform(0, 1000, shape) * (rng.random(shape) < 0.8)
    elif kind == "zero":
        load = np.zeros(shape)
    elif kind == "one_hot":
        load = np.zeros(shape)
        load[np.arange(num_layers), rng.integers(0, num_experts, num_layers)] = 1000.0
    else:
        load = np.stack([(rng.permutation(num_experts) + 1.0) ** -1.2 for _ in range(num_layers)]) * 1e4
    return topology, load, rng


def assert_invariants(plan, load, topology):
    num_layers, num_experts = load.shape
    table = plan.slot_to_expert
    assert table.shape == (num_layers, topology.num_slots) and table.dtype == np.int64
    assert (replica_counts(table, num_experts) >= 1).all(), "an expert lost its last replica"
    per_gpu = np.sort(table.reshape(num_layers, topology.num_gpus, topology.slots_per_gpu), axis=2)
    assert not (per_gpu[:, :, 1:] == per_gpu[:, :, :-1]).any(), "two replicas of one expert on a GPU"
    share_sum = np.zeros((num_layers, num_experts))
    np.add.at(share_sum, (np.arange(num_layers)[:, None], table), plan.slot_share)
    np.testing.assert_allclose(share_sum, 1.0)
    np.testing.assert_allclose(plan.gpu_load.sum(axis=1), load.sum(axis=1), rtol=1e-9, atol=1e-9)
    assert plan.imbalance == pytest.approx(PlacementTable(table, plan.slot_share).imbalance(load, topology.num_gpus))
    # the empty-layer rule (agents/protocol/placement.py): a layer without load is left out of the mean,
    # and a load without any layer loaded has no imbalance at all
    is_loaded = load.sum(axis=1) > 0
    if not is_loaded.any():
        assert plan.imbalance is None
        return
    loaded_only = PlacementTable(table[is_loaded], plan.slot_share[is_loaded])
    assert plan.imbalance == pytest.approx(loaded_only.imbalance(load[is_loaded], topology.num_gpus))
    assert plan.imbalance >= 1.0 - 1e-12


@SETTINGS
@given(problems(), st.booleans())
def test_fresh_plans_keep_invariants(problem, group_locality):
    topology, load, _ = problem
    plan = solve_placement(load, topology, group_locality=group_locality)
    assert_invariants(plan, load, topology)
    assert plan.num_moved_slots == 0
    if not load.any():
        assert plan.imbalance is None
    if plan.is_group_local:
        # every group's replicas sit on a single node
        slot_node = np.arange(topology.num_slots) // (topology.gpus_per_node * topology.slots_per_gpu)
        group = plan.slot_to_expert // (load.shape[1] // topology.num_groups)
        for layer in range(load.shape[0]):
            for g in range(topology.num_groups):
                assert len(set(slot_node[group[layer] == g])) == 1
        assert plan.mean_nodes_per_group == 1.0


@SETTINGS
@given(problems(), st.floats(0.0, 1.0), st.integers(0, 4))
def test_incremental_plans_respect_budget_and_never_get_worse(problem, budget_share, drift_seed):
    topology, load, rng = problem
    current = solve_placement(load, topology).slot_to_expert
    drifted = load * np.random.default_rng(drift_seed).lognormal(0.0, 0.3, load.shape)
    budget = int(budget_share * current.size)
    plan = solve_placement(drifted, topology, current=current, max_moved_slots=budget)
    assert_invariants(plan, drifted, topology)
    assert plan.num_moved_slots == int((plan.slot_to_expert != current).sum()) <= budget
    np.testing.assert_array_equal(plan.moved_slots, np.argwhere(plan.slot_to_expert != current))
    before = PlacementTable(current).imbalance(drifted, topology.num_gpus)
    assert plan.imbalance is None if before is None else plan.imbalance <= before + 1e-9


@SETTINGS
@given(problems(), st.booleans())
def test_arbitrary_applied_tables_are_repaired(problem, group_locality):
    topology, load, rng = problem
    # any ids in range: experts may be missing or doubled on a GPU, as an EPLB table can be
    current = rng.integers(0, load.shape[1], (load.shape[0], topology.num_slots))
    plan = solve_placement(load, topology, current=current, group_locality=group_locality)
    assert_invariants(plan, load, topology)


@settings(SETTINGS, max_examples=150)
@given(problems(), st.booleans(), st.integers(0, 4))
def test_with_an_ample_budget_a_repaired_plan_is_never_far_behind_a_fresh_one(problem, group_locality, seed):
    topology, load, rng = problem
    # any applied table: a fresh one for other loads, or random ids (missing experts, duplicates)
    if seed % 2:
        current = rng.integers(0, load.shape[1], (load.shape[0], topology.num_slots))
    else:
        other = load * np.random.default_rng(seed).lognormal(0.0, 1.0, load.shape)
        current = solve_placement(other, topology, group_locality=group_locality).slot_to_expert
    fresh = solve_placement(load, topology, group_locality=group_locality)
    plan = solve_placement(load, topology, current=current, max_moved_slots=current.size,
                           group_locality=group_locality)
    assert_invariants(plan, load, topology)
    assert plan.imbalance is None if fresh.imbalance is None else plan.imbalance <= 1.02 * fresh.imbalance + 1e-9


def test_zero_budget_keeps_a_valid_table_unchanged():
    topology = Topology(num_nodes=2, gpus_per_node=2, slots_per_gpu=3, num_groups=2)
    rng = np.random.default_rng(3)
    current = solve_placement(rng.uniform(0, 10, (2, 8)), topology).slot_to_expert
    plan = solve_placement(rng.uniform(0, 10, (2, 8)), topology, current=current, max_moved_slots=0)
    np.testing.assert_array_equal(plan.slot_to_expert, current)


def test_one_hot_load_spreads_the_hot_expert_over_every_gpu():
    topology = Topology(num_nodes=2, gpus_per_node=3, slots_per_gpu=2)
    load = np.zeros((1, 7))
    load[0, 4] = 600.0
    plan = solve_placement(load, topology)
    assert replica_counts(plan.slot_to_expert, 7)[0, 4] == topology.num_gpus
    assert plan.imbalance == pytest.approx(1.0)


@pytest.mark.parametrize("kwargs, message", [
    ({"load": np.ones((2, 3, 4))}, "shape"),
    ({"load": np.array([[1.0, -1.0, 2.0, 0.0]])}, "non-negative"),
    ({"load": np.array([[1.0, np.inf, 2.0, 0.0]])}, "finite"),
    ({"load": np.ones((1, 4)), "current": np.zeros((2, 4), dtype=int)}, "current"),
    ({"load": np.ones((1, 4)), "current": np.full((1, 4), 0.5)}, "integer"),
    ({"load": np.ones((1, 4)), "max_moved_slots": -1}, "max_moved_slots"),
    ({"load": np.ones((1, 1))}, "more than one replica"),
])
def test_invalid_input_raises_value_error(kwargs, message):
    with pytest.raises(ValueError, match=message):
        solve_placement(topology=Topology(num_nodes=1, gpus_per_node=2, slots_per_gpu=2), **kwargs)
