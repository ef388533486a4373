import numpy as np
import pytest
from support.loads import zipf_load

from agents.protocol.placement import layer_imbalance
from controlplane.solve.placement.packing import ratio_bound
from controlplane.solve.placement.solver import solve_placement
from controlplane.solve.placement.topology import Topology


@pytest.mark.parametrize("topology", [Topology(5, 8, 1), Topology(2, 4, 5, 4), Topology(1, 4, 10)])
def test_no_plan_beats_the_ratio_bound(topology):
    load = zipf_load(6, 32, 1.2)
    load[2] = 0.0  # a layer without load has no bound, as it has no imbalance
    bound = ratio_bound(load, topology.num_slots, topology.num_gpus)
    assert np.isnan(bound[2]) and (bound[~np.isnan(bound)] >= 1.0).all()
    fresh = solve_placement(load, topology)
    drifted = load * np.random.default_rng(1).lognormal(0.0, 0.5, load.shape)
    moved = solve_placement(drifted, topology, current=fresh.slot_to_expert, max_moved_slots=10)
    for plan, of in ((fresh, load), (moved, drifted)):
        ratio, lowest = layer_imbalance(plan.gpu_load), ratio_bound(of, topology.num_slots, topology.num_gpus)
        is_loaded = ~np.isnan(ratio)
        assert (ratio[is_loaded] >= lowest[is_loaded] * (1 - 1e-12)).all()


def test_one_slot_per_gpu_a_fresh_solve_reaches_the_bound_and_a_resolve_moves_nothing():
    topology = Topology(2, 8, 1)  # 16 slots, 12 experts: a hot expert cannot spread thin enough
    load = zipf_load(5, 12, 1.5)
    bound = ratio_bound(load, topology.num_slots, topology.num_gpus)
    assert (bound > 1.2).all()
    fresh = solve_placement(load, topology)
    np.testing.assert_allclose(layer_imbalance(fresh.gpu_load), bound, rtol=1e-12)
    again = solve_placement(load, topology, current=fresh.slot_to_expert, max_moved_slots=80)
    assert again.num_moved_slots == 0
