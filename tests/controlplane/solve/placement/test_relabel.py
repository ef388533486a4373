import numpy as np

from controlplane.solve.placement.relabel import relabel
from controlplane.solve.placement.solver import solve_placement
from controlplane.solve.placement.topology import Topology


def permuted(table, topology, gpu_order):
    """Same per-GPU expert sets, GPUs reordered and each GPU's slots reversed."""
    by_gpu = table.reshape(table.shape[0], topology.num_gpus, topology.slots_per_gpu)
    return by_gpu[:, gpu_order, ::-1].reshape(table.shape)


def test_relabelling_undoes_a_gpu_permutation():
    topology = Topology(num_nodes=2, gpus_per_node=4, slots_per_gpu=3)
    load = np.random.default_rng(0).uniform(1, 100, (3, 20))
    current = solve_placement(load, topology).slot_to_expert
    shuffled = permuted(current, topology, np.random.default_rng(1).permutation(8))
    assert (shuffled != current).mean() > 0.5
    np.testing.assert_array_equal(relabel(shuffled, current, 3, 4, False, 20), current)


def test_node_bound_relabelling_keeps_each_node_whole():
    topology = Topology(num_nodes=2, gpus_per_node=2, slots_per_gpu=2, num_groups=2)
    load = np.random.default_rng(2).uniform(1, 100, (2, 6))
    current = solve_placement(load, topology, group_locality=True).slot_to_expert
    swapped = permuted(current, topology, np.array([3, 2, 1, 0]))  # node 0 <-> node 1, GPUs reversed
    result = relabel(swapped, current, 2, 2, True, 6)
    np.testing.assert_array_equal(result, current)
    # a GPU never crosses to another node: node 0 of the result holds what node 1 of the input held
    new_node_sets = [set(swapped[layer, 4:]) for layer in range(2)]
    assert [set(result[layer, :4]) for layer in range(2)] == new_node_sets


def test_moves_equal_slots_outside_the_best_overlap():
    current = np.array([[0, 1, 2, 3]])
    table = np.array([[3, 0, 1, 2]])  # GPU 0 {3, 0} overlaps applied GPU 0 by one, GPU 1 by one
    result = relabel(table, current, 2, 2, False, 4)
    assert (result != current).sum() == 2
    assert sorted(result[0, :2]) in ([0, 3], [1, 2]) and sorted(result[0, 2:]) in ([1, 2], [0, 3])
