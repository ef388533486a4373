"""The EPLB baseline (benchmarks/baselines/eplb.py) and the placement algorithm interface it shares with ours."""

import numpy as np
from support.loads import zipf_load

from agents.protocol.placement import PlacementTable, replica_counts
from benchmarks.baselines.eplb import Eplb, balanced_packing, rebalance_experts, replicate_experts
from controlplane.solve.placement.algorithm import MigrationAware, PlacementAlgorithm
from controlplane.solve.placement.solver import solve_placement
from controlplane.solve.placement.topology import Topology


def varied_zipf(num_layers: int, num_experts: int, seed: int) -> np.ndarray:
    """[num_layers, num_experts] tokens of `zipf_load`'s shape, each layer's exponent drawn in 0.8..1.2."""
    exponent = np.random.default_rng(seed).uniform(0.8, 1.2, num_layers)[:, None]
    return zipf_load(num_layers, num_experts, exponent, seed=seed)


def test_balanced_packing_fills_every_pack_equally():
    weight = np.random.default_rng(0).uniform(0, 1, (3, 12))
    pack, rank = balanced_packing(weight, 4)
    for row in range(3):
        assert sorted(np.bincount(pack[row])) == [3, 3, 3, 3]
        assert len(set(zip(pack[row], rank[row], strict=True))) == 12


def test_replication_gives_extra_slots_to_the_hottest_per_replica():
    phy_to_log, count = replicate_experts(np.array([[8.0, 3.0, 1.0]]), 5)
    assert count.tolist() == [[3, 1, 1]]
    assert sorted(phy_to_log[0].tolist()) == [0, 0, 0, 1, 2]


def test_hierarchical_keeps_groups_on_nodes_and_ours_balances_at_least_as_well():
    load = varied_zipf(6, 64, seed=1)
    topology = Topology(num_nodes=2, gpus_per_node=4, slots_per_gpu=9, num_groups=4)
    eplb = rebalance_experts(load, topology.num_slots, 4, 2, topology.num_gpus)
    assert (replica_counts(eplb, 64) >= 1).all()
    half = topology.num_slots // 2
    assert all(set(eplb[layer, :half] // 16).isdisjoint(eplb[layer, half:] // 16) for layer in range(6))
    ours = solve_placement(load, topology, group_locality=True)
    assert ours.is_group_local
    assert ours.imbalance <= PlacementTable(eplb).imbalance(load, topology.num_gpus) + 1e-9
    eplb_global = rebalance_experts(load, topology.num_slots, 1, 1, topology.num_gpus)
    assert solve_placement(load, topology).imbalance <= PlacementTable(eplb_global).imbalance(load, 8) + 1e-9


def test_both_algorithms_meet_the_interface_and_plan_the_same_way():
    """Through PlacementAlgorithm both return plans whose numbers are the protocol's for their tables;
    EPLB re-solves from scratch, so after a drift it moves most slots where ours moves few."""
    rng = np.random.default_rng(2)
    load = varied_zipf(4, 64, seed=2)
    drifted = load * rng.lognormal(0.0, 0.1, load.shape)
    topology = Topology(num_nodes=2, gpus_per_node=4, slots_per_gpu=9, num_groups=4)
    moved = {}
    for algorithm in (Eplb(), MigrationAware()):
        assert isinstance(algorithm, PlacementAlgorithm)
        before = algorithm.solve(load, topology, group_locality=True)
        assert before.is_group_local and before.num_moved_slots == 0
        after = algorithm.solve(drifted, topology, current=before.slot_to_expert, group_locality=True)
        placement = PlacementTable(after.slot_to_expert, after.slot_share)
        np.testing.assert_allclose(after.gpu_load, placement.gpu_load(drifted, topology.num_gpus))
        assert after.imbalance == placement.imbalance(drifted, topology.num_gpus)
        assert after.num_moved_slots == int((after.slot_to_expert != before.slot_to_expert).sum())
        moved[algorithm.name] = after.num_moved_slots
    assert moved["moectl"] < moved["EPLB"]
