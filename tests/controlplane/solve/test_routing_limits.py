"""The routing-limit rule, table-driven: bounded single steps, range, recall floor with margin."""

from __future__ import annotations

import pytest

from controlplane.solve.routing import plan_topk_group

BASE = dict(num_groups=8, num_experts=64, top_k=6, target=0.3, recall_floor=0.9)


@pytest.mark.parametrize("current, shares, recall, extra, expected", [
    (None, [0.4, 0.4], [1.0, 1.0], {}, 7),  # over target: one group less
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
    step = plan_topk_group(current=current, all2all_share=shares, recall=recall, **(BASE | extra))
    assert step.topk_group == expected, step.reason
    assert step.is_change_from(current) == (expected != current)


def test_steps_start_from_the_models_own_limit():
    # the model routes with 2 of 8 groups when told nothing: tightening goes to 1, never "up" to 7
    step = plan_topk_group(current=None, default=2, all2all_share=[0.5, 0.5], recall=[1.0, 1.0], **BASE)
    assert step.topk_group == 1, step.reason
