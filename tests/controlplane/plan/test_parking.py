"""What lifts a park (controlplane/plan/parking.py): one definition of a material change for every knob."""

from __future__ import annotations

import numpy as np
import pytest

from controlplane.observed.knob_park import KnobInputs, model_key
from controlplane.plan.parking import LOAD_SHIFT, load_shift, material_change

SHARE = np.array([[0.5, 0.3, 0.2], [0.4, 0.4, 0.2]])
PARKED = KnobInputs(model="m1", policy_version=3, tokens_per_second=1000.0, expert_share=SHARE)


@pytest.mark.parametrize("now, words", [
    (PARKED, None),
    (KnobInputs("m1", 3, 1400.0, SHARE), None),  # the usual swing of a workload
    (KnobInputs("m1", 3, 600.0, SHARE + [[0.02, -0.02, 0.0]] * 2), None),  # noise in the load
    (KnobInputs("m2", 3, 1000.0, SHARE), "the model changed"),
    (KnobInputs("m1", 4, 1000.0, SHARE), "the policy changed (v3 -> v4)"),
    (KnobInputs("m1", 3, 2000.0, SHARE), "the token rate moved from 1000/s to 2000/s"),
    (KnobInputs("m1", 3, 450.0, SHARE), "the token rate moved"),
    (KnobInputs("m1", 3, 1000.0, SHARE[:, ::-1]), "the expert load shifted (total-variation distance 0.25"),
    (KnobInputs("m1", 3, None, SHARE), None),  # an idle window says nothing about the rate
])
def test_material_change(now, words):
    why = material_change(PARKED, now)
    assert (why is None) if words is None else (words in why), why


def test_a_knob_that_does_not_depend_on_hot_experts_ignores_their_moves():
    routing = KnobInputs("m1", 3, 1000.0, None)
    assert material_change(routing, KnobInputs("m1", 3, 1000.0, SHARE[:, ::-1])) is None


def test_load_shift_is_the_mean_total_variation_distance_over_layers():
    assert load_shift(SHARE, SHARE) == 0
    assert load_shift(SHARE, SHARE[:, ::-1]) == pytest.approx((0.3 + 0.2) / 2)  # per layer: 0.3, 0.2
    assert LOAD_SHIFT <= 0.2  # a full code <-> prose swing of the bundled model (0.17-0.23 per layer) counts


def test_model_key_is_stable_and_shape_sensitive():
    shape = {"name": "tiny", "num_experts": 32, "num_groups": 4}
    assert model_key(shape) == model_key(dict(reversed(list(shape.items()))))
    assert model_key(shape) != model_key(shape | {"num_groups": 8})
