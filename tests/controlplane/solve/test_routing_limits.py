"""The routing-limit rule, table-driven: bounded steps that bind, range (never looser than the model's own
limit), recall floor with margin, and the effect each step predicts."""

from __future__ import annotations

import pytest

from controlplane.solve.routing import GroupLimits, groups_reached, plan_topk_group, predicted_share

SHAPE = dict(num_groups=8, num_experts=64, top_k=6)


def plan(current, shares, recall, default=None, **limits):
    """The rule at target 0.3 and recall floor 0.9, for a model of SHAPE (as `limits` change it)."""
    return plan_topk_group(current=current, limits=GroupLimits(**(SHAPE | limits), model_limit=default),
                           all2all_share=shares, recall=recall, target=0.3, recall_floor=0.9)


@pytest.mark.parametrize("current, shares, recall, extra, expected", [
    (None, [0.4, 0.4], [1.0, 1.0], {}, 4),  # over target: the nearest limit that binds (6 of 8 groups reach <= 5)
    (4, [0.4, 0.2], [1.0, 1.0], {}, 4),  # not sustained
    (4, [0.4, 0.4], [0.93, 0.93], {}, 4),  # recall within the margin over its floor: hold
    (3, [0.2, 0.2], [0.85, 0.85], {}, 4),  # recall under the floor: one group more
    (8, [0.2, 0.2], [0.85, 0.85], {}, 8),  # already unlimited
    (2, [0.5, 0.5], [1.0, 1.0], {"top_k": 17}, 3),  # top_k needs 3 groups of 8 experts: clamp up
    (3, [0.5, 0.5], [1.0, 1.0], {"min_groups": 3}, 3),  # the policy's floor
    (None, [0.5, 0.5], [1.0, 1.0], {"max_groups": 4}, 4),  # the policy's ceiling applies to "unlimited"
    (5, [0.1, 0.1], [1.0, 1.0], {}, 5),  # under target: a low share is no reason to loosen
])
def test_steps(current, shares, recall, extra, expected):
    step = plan(current, shares, recall, **extra)
    assert step.topk_group == expected, step.reason
    assert step.is_change_from(current) == (expected != current)


def test_steps_start_from_the_models_own_limit():
    # the model routes with 2 of 8 groups when told nothing: tightening goes to 1, never "up" to 7
    step = plan(None, [0.5, 0.5], [1.0, 1.0], default=2)
    assert step.topk_group == 1, step.reason


@pytest.mark.parametrize("current, recall, expected", [
    (2, [0.5, 0.5], 2),  # recall under its floor at the model's own limit: never looser than trained
    (3, [1.0, 1.0], 2),  # a limit looser than the model's own is brought back to it
    (1, [0.5, 0.5], 2),  # under the floor below it: loosen, up to the model's own
])
def test_the_models_own_limit_is_the_loosest(current, recall, expected):
    step = plan(current, [0.2, 0.2], recall, default=2)
    assert step.topk_group == expected, step.reason


def test_a_tightening_carries_its_predicted_effect():
    step = plan(None, [0.36, 0.34], [1.0, 1.0], default=4, top_k=8)
    effect = step.effect
    assert step.topk_group == 3 and effect.signal == "all2all_share" and effect.direction == -1
    assert effect.before == pytest.approx(0.35) and effect.predicted == pytest.approx(predicted_share(0.35, 4, 3, 8, 8))
    assert 0.25 < effect.predicted < 0.3 and effect.floors == {"routing_recall": 0.9}
    loosen = plan(3, [0.2, 0.2], [0.8, 0.8], default=4)
    assert loosen.topk_group == 4 and loosen.effect.signal == "routing_recall" and loosen.effect.predicted == 1.0


def test_the_prior_scales_traffic_with_the_groups_tokens_reach():
    assert groups_reached(1, 4, 4) == 1.0
    assert groups_reached(4, 4, 4) == pytest.approx(4 * (1 - 0.75 ** 4))  # expected distinct groups of 4 draws
    assert groups_reached(5, 8, 4) == groups_reached(8, 8, 4)  # 4 experts never span 5 groups
    assert predicted_share(0.5, 2, 2, 4, 4) == pytest.approx(0.5)
    assert predicted_share(0.8, 2, 1, 4, 4) < 0.7
