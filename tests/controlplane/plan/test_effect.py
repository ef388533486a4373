"""The verdict on a change (controlplane/plan/effect.py): verified means the signal moved as predicted (at least
half of it, give or take the noise) and no floor broke."""

from __future__ import annotations

import pytest

from controlplane.desired import Effect
from controlplane.plan.effect import judge

TIGHTEN = Effect("all2all_share", -1, before=0.40, predicted=0.30, tolerance=0.01, floors={"routing_recall": 0.9})


@pytest.mark.parametrize("share, recall, is_intended, words", [
    (0.31, 0.95, True, "0.400 -> 0.310 (predicted 0.300)"),
    (0.36, 0.95, True, "0.400 -> 0.360"),  # half the predicted move, less the tolerance, is enough
    (0.39, 0.95, False, "did not move as intended"),  # CPU gloo, measured: 0.801 -> 0.796
    (0.45, 0.95, False, "did not move as intended"),
    (0.30, 0.85, False, "routing_recall 0.850 < floor 0.9"),  # moved, at a price the policy refuses
    (0.39, 0.85, False, "did not move as intended; routing_recall 0.850 < floor 0.9"),
    (0.30, None, True, "0.400 -> 0.300"),  # a floor not measured is not judged broken
])
def test_judge(share, recall, is_intended, words):
    verdict = judge(TIGHTEN, {"all2all_share": share, "routing_recall": recall, "imbalance": None})
    assert verdict.is_intended == is_intended and words in verdict.reason, verdict.reason
    assert verdict.measured == {"all2all_share": share} | ({"routing_recall": recall} if recall else {})


def test_a_rising_signal_and_an_unmeasured_one():
    loosen = Effect("routing_recall", +1, before=0.6, predicted=1.0, tolerance=0.02)
    assert judge(loosen, {"routing_recall": 0.95}).is_intended
    assert not judge(loosen, {"routing_recall": 0.7}).is_intended
    assert "not measured" in judge(loosen, {"routing_recall": None}).reason


def test_the_effect_travels_as_json_on_the_action():
    assert Effect.from_json(TIGHTEN.to_json()) == TIGHTEN
    assert Effect.from_json(None) is None and Effect.from_json({}) is None
