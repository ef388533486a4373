"""The routing-limit check on plain windows: a limit honoured is quiet, one not in effect is named with its
evidence once sustained, and what cannot be judged (no limit, no measure, a limit just changed) is not."""

from __future__ import annotations

import numpy as np
import pytest

from controlplane.desired import Mode, Policy
from controlplane.observed.pool import PoolState
from controlplane.observed.window import GROUPS_AT, NODES_AT, Window
from controlplane.plan.routing_reach import MAX_OVER_LIMIT_SHARE, check_routing_limit, window_reach
from tests.support.pool_states import routing_in_force

HONOURED = [0, 300, 700, 0, 0]  # tokens by groups reached (0..top_k=4), under topk_group=2
BYPASSED = [0, 100, 500, 300, 100]  # the same router, limit ignored: 40% of tokens reach 3 or 4 groups
NODES = [0, 600, 400, 0, 0]


def window(index: int, groups: list[int] | None, nodes: list[int] | None = NODES) -> Window:
    counters = {f"{GROUPS_AT}{n}": float(v) for n, v in enumerate(groups or [])}
    counters |= {f"{NODES_AT}{n}": float(v) for n, v in enumerate(nodes or [])} if groups else {}
    return Window(index=index, start=index * 10.0, seconds=10.0, placement_version=0, num_reports=2,
                  num_slot_reports=2, expert_tokens=np.zeros((2, 32)), slot_tokens=np.zeros((2, 40)),
                  counters=counters)


def pool(*histograms, topk_group=None, model_topk_group=2, routing_changed_at=None) -> PoolState:
    return PoolState(deployment="tiny", role="decode", num_layers=2, num_experts=32, num_groups=4, ep_size=2,
                     slots_per_rank=20, gpus_per_node=1, num_agents=2, num_fresh_agents=2, placement_version=0,
                     slot_to_expert=np.zeros((2, 40), dtype=np.int64),
                     windows=tuple(window(i, h) for i, h in enumerate(histograms)),
                     in_force=routing_in_force(topk_group, routing_changed_at), top_k=4,
                     model_topk_group=model_topk_group)


POLICY = Policy(mode=Mode.auto, sustained_windows=2)


def test_a_window_reads_the_mean_and_max_groups_and_the_share_past_the_limit():
    reach = window_reach(window(7, BYPASSED), limit=2)
    assert (reach.index, reach.num_tokens, reach.groups_max, reach.nodes_max) == (7, 1000, 4, 2)
    assert reach.groups_mean == pytest.approx((100 + 1000 + 900 + 400) / 1000)
    assert reach.nodes_mean == pytest.approx(1.4) and reach.over_limit_share == pytest.approx(0.4)
    assert window_reach(window(8, None), limit=2) is None  # agents from before the measure
    assert window_reach(window(9, [0, 0, 0, 0, 0]), limit=2) is None  # no token routed


def test_a_limit_bypassed_for_the_sustained_windows_is_named_with_its_evidence():
    reach = check_routing_limit(POLICY, pool(HONOURED, BYPASSED, BYPASSED))
    assert reach.is_violated and reach.limit == 2
    assert "topk_group=2 not in effect" in reach.reason and "40% of tokens" in reach.reason
    assert "windows 1, 2" in reach.reason and "nodes per token up to 2" in reach.reason
    evidence = reach.evidence()
    assert evidence["windows"] == [1, 2] and evidence["per_window"][0]["groups_max"] == 4


@pytest.mark.parametrize("state, policy, words", [
    (pool(HONOURED, HONOURED, HONOURED), POLICY, "honoured: at most 2 groups"),
    (pool(HONOURED, HONOURED, BYPASSED), POLICY, "honoured"),  # one window is not sustained
    (pool(BYPASSED), POLICY, "1 windows measured"),
    (pool(BYPASSED, BYPASSED, model_topk_group=None), POLICY, "no group limit in force"),
    (pool(BYPASSED, BYPASSED, model_topk_group=4), POLICY, "no group limit in force"),  # 4 of 4 groups: no limit
    (pool(BYPASSED, BYPASSED), Policy(mode=Mode.off), "mode is off"),
    (pool(None, None, None), POLICY, "0 windows measured"),
])
def test_what_is_honoured_or_cannot_be_judged_is_not_a_violation(state, policy, words):
    reach = check_routing_limit(policy, state)
    assert not reach.is_violated and words in reach.reason, reach.reason


def test_the_issued_limit_wins_over_the_models_and_is_judged_once_agents_run_it():
    # tightened 3 -> 2 at t=15: windows 1 and 2 still ran steps under 3 groups, window 3 is the first judged
    loosened_steps = [0, 200, 500, 300, 0]
    state = pool(loosened_steps, loosened_steps, loosened_steps, HONOURED, HONOURED, topk_group=2,
                 model_topk_group=3, routing_changed_at=15.0)
    reach = check_routing_limit(POLICY, state)
    assert not reach.is_violated and [w.index for w in reach.windows] == [3, 4]
    assert reach.windows[-1].over_limit_share <= MAX_OVER_LIMIT_SHARE
    state = pool(HONOURED, BYPASSED, BYPASSED, topk_group=3, model_topk_group=2)
    assert check_routing_limit(POLICY, state).is_violated  # 3 issued: 100 of 1000 tokens reach 4 groups
    assert check_routing_limit(POLICY, state).limit == 3
