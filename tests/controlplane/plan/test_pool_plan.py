"""The pool planner's part of a pass (controlplane/plan/pool_plan.py), on a PD deployment whose windows
(tests/support/pools.py) are over or within their latency targets: the moves it asks, the local-prefill threshold
only on the decode pool and only when one is known, and a JSON-safe summary."""

from __future__ import annotations

import math
from dataclasses import replace

from support.pools import view, window

from controlplane.config import Settings
from controlplane.desired import KnobKind, Mode, Policy
from controlplane.plan.pool_inputs import ObservedPools
from controlplane.plan.pool_plan import POOLS_PLAN, finite, plan_deployment

AUTO = Policy(mode=Mode.auto)


def plan(*, itl: float, is_threshold_known: bool = True):
    windows = [window(t, rate=10.0, ttft=0.4, itl=itl) for t in range(130, 181, 10)]
    return plan_deployment(ObservedPools("d", view(windows), is_threshold_known), AUTO, Settings())


def test_a_decode_pool_over_its_itl_target_grows_and_sends_short_prompts_back_to_the_prefill_pool():
    pool_plan = plan(itl=0.2)  # 4x the 50 ms target
    moves = POOLS_PLAN.moves(pool_plan, AUTO, None, "decode")
    assert [m.kind for m in moves] == [KnobKind.pool_size, KnobKind.local_prefill_threshold]
    size, threshold = moves
    assert size.value > 3 and size.predicted["replicas_before"] == 3 and size.predicted["replicas_after"] == size.value
    assert threshold.value < 512 and threshold.predicted == {"tokens_before": 512, "tokens_after": threshold.value}
    assert all(m.kind != KnobKind.local_prefill_threshold for m in POOLS_PLAN.moves(pool_plan, AUTO, None, "prefill"))
    assert pool_plan.summary["pools"]["decode"]["decision"]["target"] == size.value
    assert pool_plan.summary["measured"]["itl_p90"] == 0.2


def test_pools_within_their_targets_move_nothing():
    pool_plan = plan(itl=0.03)
    assert [POOLS_PLAN.moves(pool_plan, AUTO, None, role) for role in ("prefill", "decode")] == [[], []]
    assert POOLS_PLAN.moves(None, AUTO, None, "decode") == []  # no pool planner sizes the deployment


def test_a_threshold_nobody_knows_is_neither_decided_nor_shown():
    pool_plan = plan(itl=0.2, is_threshold_known=False)
    assert pool_plan.plan.threshold is None and pool_plan.summary["threshold"] == {"tokens": None, "decision": None}
    assert [m.kind for m in POOLS_PLAN.moves(pool_plan, AUTO, None, "decode")] == [KnobKind.pool_size]


def test_the_summary_is_json_safe():
    assert finite({"a": [math.inf, 1.0, (math.nan,)], "b": "x"}) == {"a": [None, 1.0, [None]], "b": "x"}


def test_a_pool_the_planner_does_not_size_gets_no_decision_and_no_move():
    """A unified pool beside prefill and decode pools: the PD planner sizes those two only; the third is left out
    of the plan people read and asks nothing (it once ended the pass with StopIteration)."""
    windows = [window(t, rate=10.0, ttft=0.4, itl=0.2) for t in range(130, 181, 10)]
    pd = view(windows)
    mixed = replace(pd, pools=pd.pools | {"unified": pd.pools["decode"]})
    pool_plan = plan_deployment(ObservedPools("d", mixed, True), AUTO, Settings())
    assert set(pool_plan.summary["pools"]) == {"prefill", "decode"}
    assert POOLS_PLAN.moves(pool_plan, AUTO, None, "unified") == []
