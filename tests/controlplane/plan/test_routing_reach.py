"""The routing-limit check on plain windows: a limit honoured is quiet, one not in effect is named with its
evidence once sustained, and what cannot be judged (no limit, no measure, a limit just changed) is not."""

from __future__ import annotations

import numpy as np
import pytest

from controlplane.desired import Mode, Policy
from controlplane.observed.pool import PoolState
from controlplane.observed.window import GROUPS_AT, NODES_AT, Window
from controlplane.plan.routing_reach import MAX_OVER_LIMIT_SHARE, check_routing_limit, window_reach
from tests.support.pool_states import loop_window, pool_state, routing_in_force

HONOURED = [0, 300, 700, 0, 0]  # tokens by groups reached (0..top_k=4), under topk_group=2
BYPASSED = [0, 100, 500, 300, 100]  # the same router, limit ignored: 40% of tokens reach 3 or 4 groups
NODES = [0, 600, 400, 0, 0]


def reach_window(index: int, groups: list[int] | None, nodes: list[int] | None = NODES) -> Window:
    """Tokens by groups reached `groups` (and nodes `nodes`, only when groups were counted); no load."""
    counters = {f"{GROUPS_AT}{n}": float(v) for n, v in enumerate(groups or [])}
    counters |= {f"{NODES_AT}{n}": float(v) for n, v in enumerate(nodes or [])} if groups else {}
    return loop_window(index, np.zeros((2, 32)), np.zeros((2, 40)), num_reports=2, counters=counters)


def reach_pool(*histograms, topk_group=None, model_topk_group=2, routing_changed_at=None) -> PoolState:
    return pool_state(np.zeros((2, 40), dtype=np.int64), 32, (reach_window(i, h) for i, h in enumerate(histograms)),
                      ep=2, gpus_per_node=1, deployment="tiny", top_k=4, model_topk_group=model_topk_group,
                      in_force=routing_in_force(topk_group, routing_changed_at))


POLICY = Policy(mode=Mode.auto, sustained_windows=2)


def test_a_window_reads_the_mean_and_max_groups_and_the_share_past_the_limit():
    reach = window_reach(reach_window(7, BYPASSED), limit=2)
    assert (reach.index, reach.num_tokens, reach.groups_max, reach.nodes_max) == (7, 1000, 4, 2)
    assert reach.groups_mean == pytest.approx((100 + 1000 + 900 + 400) / 1000)
    assert reach.nodes_mean == pytest.approx(1.4) and reach.over_limit_share == pytest.approx(0.4)
    assert window_reach(reach_window(8, None), limit=2) is None  # agents from before the measure
    assert window_reach(reach_window(9, [0, 0, 0, 0, 0]), limit=2) is None  # no token routed


def test_a_limit_bypassed_for_the_sustained_windows_is_named_with_its_evidence():
    reach = check_routing_limit(POLICY, reach_pool(HONOURED, BYPASSED, BYPASSED))
    assert reach.is_violated and reach.limit == 2
    assert "topk_group=2 not in effect" in reach.reason and "40% of tokens" in reach.reason
    assert "windows 1, 2" in reach.reason and "nodes per token up to 2" in reach.reason
    evidence = reach.evidence()
    assert evidence["windows"] == [1, 2] and evidence["per_window"][0]["groups_max"] == 4


@pytest.mark.parametrize("state, policy, words", [
    (reach_pool(HONOURED, HONOURED, HONOURED), POLICY, "honoured: at most 2 groups"),
    (reach_pool(HONOURED, HONOURED, BYPASSED), POLICY, "honoured"),  # one window is not sustained
    (reach_pool(BYPASSED), POLICY, "1 windows measured"),
    (reach_pool(BYPASSED, BYPASSED, model_topk_group=None), POLICY, "no group limit in force"),
    (reach_pool(BYPASSED, BYPASSED, model_topk_group=4), POLICY, "no group limit in force"),  # 4 of 4 groups: no limit
    (reach_pool(BYPASSED, BYPASSED), Policy(mode=Mode.off), "mode is off"),
    (reach_pool(None, None, None), POLICY, "0 windows measured"),
])
def test_what_is_honoured_or_cannot_be_judged_is_not_a_violation(state, policy, words):
    reach = check_routing_limit(policy, state)
    assert not reach.is_violated and words in reach.reason, reach.reason


def test_the_issued_limit_wins_over_the_models_and_is_judged_once_agents_run_it():
    # tightened 3 -> 2 at t=15: windows 1 and 2 still ran steps under 3 groups, window 3 is the first judged
    loosened_steps = [0, 200, 500, 300, 0]
    state = reach_pool(loosened_steps, loosened_steps, loosened_steps, HONOURED, HONOURED, topk_group=2,
                 model_topk_group=3, routing_changed_at=15.0)
    reach = check_routing_limit(POLICY, state)
    assert not reach.is_violated and [w.index for w in reach.windows] == [3, 4]
    assert reach.windows[-1].over_limit_share <= MAX_OVER_LIMIT_SHARE
    state = reach_pool(HONOURED, BYPASSED, BYPASSED, topk_group=3, model_topk_group=2)
    assert check_routing_limit(POLICY, state).is_violated  # 3 issued: 100 of 1000 tokens reach 4 groups
    assert check_routing_limit(POLICY, state).limit == 3
