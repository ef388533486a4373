"""`moectl slots`: what each number of slots per GPU would reach on a pool's measured load."""

from __future__ import annotations

import numpy as np
import pytest
from support.fleet import CPU, run_windows, start_fleet

from controlplane.cmd.slots import SlotsError, slots_report
from controlplane.solve.placement.shape import shape_options


def test_more_slots_per_gpu_lift_the_floor_and_one_slot_reaches_it_exactly():
    rng = np.random.default_rng(0)
    share = 1.0 / np.arange(1, 33) ** 1.2
    load = np.stack([rng.permutation(share) for _ in range(3)]) * 1e4  # 3 layers x 32 Zipf-skewed experts
    options = shape_options(load, num_gpus=16, max_slots_per_gpu=4)
    assert [o.slots_per_gpu for o in options] == [2, 3, 4]  # one slot per GPU leaves 16 experts without a slot
    assert [o.num_redundant for o in options] == [0, 16, 32]
    for o in options:
        assert 1.0 <= o.floor <= o.reached + 1e-9
    assert options[-1].reached < options[0].reached
    [one] = shape_options(load, num_gpus=40, max_slots_per_gpu=1)
    assert one.reached == pytest.approx(one.floor, rel=1e-9) and one.floor > 1.5


def test_a_one_slot_pool_is_told_how_many_slots_per_gpu_meet_its_threshold(client, sessions, settings, clock):
    fleet = start_fleet(client, {"mode": "observe"}, **(CPU | {"ep_size": 40, "slots_per_rank": 1}))
    with pytest.raises(SlotsError, match="has no 'decode' pool reporting"):
        slots_report(client, "sim-0", "decode")
    run_windows(client, sessions, settings, clock, fleet, 3, reconcile=False)
    text = slots_report(client, "sim-0", "decode", max_slots_per_gpu=4)
    rows = {line.split()[0]: line for line in text.splitlines() if line[:1].isdigit()}
    assert list(rows) == ["1", "2", "3", "4"] and "(now)" in rows["1"]
    floor, solved = (float(v) for v in rows["1"].split()[3:5])
    assert floor == solved > 1.5 and "<=" not in rows["1"]  # at one slot per GPU the solve meets the floor
    met = [k for k, line in rows.items() if "<= 1.15" in line]
    assert met, text
    assert f"imbalance_threshold 1.15: {met[0]}\n" in text
    for line in rows.values():  # marked exactly where the solve is within the threshold
        assert ("<= 1.15" in line) == (float(line.split()[-3 if "<=" in line else -1]) <= 1.15)
