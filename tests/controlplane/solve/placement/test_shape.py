"""Other pool shapes on a measured load (controlplane/solve/placement/shape.py): one option per slots per GPU from
the fewest that seat every expert, each with the floor no placement gets under and the fresh solve it reaches."""

from __future__ import annotations

import numpy as np
from support.loads import zipf_load

from controlplane.solve.placement.shape import shape_options

LOAD = zipf_load(3, 16, exponent=1.0, seed=4)  # [3 layers, 16 experts], a few hot experts per layer


def test_more_slots_per_gpu_never_raise_the_floor_and_no_solve_gets_under_it():
    options = shape_options(LOAD, num_gpus=4, max_slots_per_gpu=7)
    assert [(o.slots_per_gpu, o.num_redundant) for o in options] == [(4, 0), (5, 4), (6, 8), (7, 12)]
    floors = [o.floor for o in options]
    assert all(later <= earlier + 1e-9 for earlier, later in zip(floors, floors[1:], strict=False))
    assert floors[-1] < floors[0]  # redundant slots for the hot experts pay off on a skewed load
    assert all(1.0 <= o.floor <= o.reached + 1e-9 for o in options)


def test_a_cap_below_the_fewest_slots_gives_the_fewest_alone_and_an_empty_load_no_floor():
    assert [o.slots_per_gpu for o in shape_options(LOAD, num_gpus=4, max_slots_per_gpu=2)] == [4]
    (empty,) = shape_options(np.zeros((3, 16)), num_gpus=4, max_slots_per_gpu=4)
    assert empty.floor is None
