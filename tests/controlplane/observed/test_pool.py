"""A pool as the loop sees it (controlplane/observed/pool.py): what each knob holds, the windows a change is
judged on, the recall against the model's own routing, and the load a knob's park is compared on."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from support.pool_states import NUM_EXPERTS, every_rank_reported, loop_window, pool_state, routing_in_force

from agents.protocol import default_slot_to_expert
from controlplane.desired import KnobKind
from controlplane.observed.knob_in_force import KnobInForce
from controlplane.observed.knob_park import model_key
from controlplane.observed.pool import LOAD_SPAN_SECONDS

TABLE = default_slot_to_expert(2, NUM_EXPERTS, 20)  # 4 GPUs of 5 slots
LOAD = np.full((2, NUM_EXPERTS), 10.0)


def even_window(index: int, *, version: int = 0, seconds: float = 10.0, counters=None, **fields):
    """`index`'s window of LOAD, every slot processing 4 tokens, every rank reported."""
    return loop_window(index, LOAD, np.full((2, 20), 4.0), version=version, seconds=seconds, num_reports=4,
                       counters=every_rank_reported(4) | (counters or {}), **fields)


def test_a_knob_never_issued_is_at_version_0_and_the_routing_limit_falls_back_to_the_models_then_all():
    pool = pool_state(TABLE, NUM_EXPERTS, num_groups=4)
    assert pool.knob(KnobKind.expert_capacity) == KnobInForce() and pool.topk_group is None
    assert pool.effective_topk_group == 4
    assert replace(pool, model_topk_group=2).effective_topk_group == 2
    assert replace(pool, model_topk_group=2, in_force=routing_in_force(1, 50.0)).effective_topk_group == 1
    assert KnobInForce.issued(0, None, 123.0).changed_at is None  # version 0: no change to judge, whatever its row


def test_a_one_number_knob_is_judged_on_the_windows_from_its_change_on():
    pool = pool_state(TABLE, NUM_EXPERTS, [even_window(i) for i in range(5)], in_force=routing_in_force(2, 20.0))
    assert [w.index for w in pool.routing_windows()] == [2, 3, 4]
    assert [w.index for w in pool.windows_since_change(KnobKind.expert_capacity)] == [0, 1, 2, 3, 4]


def test_a_placement_is_judged_on_complete_windows_mostly_under_it():
    windows = [even_window(0), even_window(1, version=1), even_window(2, version=1, num_slot_reports=3),
               loop_window(3, LOAD * 10, np.full((2, 20), 4.0), version=1, num_reports=4), even_window(4, version=1)]
    pool = pool_state(TABLE, NUM_EXPERTS, windows, placement_version=1)
    # 2: a rank's slot load missing; 3: the switch came late in it (slot load under half the routed load)
    assert [w.index for w in pool.current_windows()] == [1, 4]
    assert [w.index for w in pool.windows_under(0)] == [0]


@pytest.mark.parametrize("limit, model_limit, reference, recall", [
    (None, None, None, 0.6),  # no group limit in the model: its own routing is the unconstrained top-k
    (2, 2, None, 1.0),  # at the model's own limit
    (1, 2, 0.8, 0.75),  # tighter: the share of the model's own top-k the limit keeps
    (1, 2, None, None),  # tighter, with no reference recorded: unknown
])
def test_recall_is_against_the_models_own_routing(limit, model_limit, reference, recall):
    pool = pool_state(TABLE, NUM_EXPERTS, model_topk_group=model_limit, recall_reference=reference,
                      in_force=routing_in_force(limit, 0.0 if limit else None))
    measured = even_window(0, counters={"routing_recall_sum": 1.2, "routing_recall_count": 2})
    assert pool.routing_recall(measured) == (pytest.approx(recall) if recall is not None else None)


def test_signals_pool_the_counters_and_average_the_imbalance():
    windows = [even_window(0, counters={"forward_seconds": 1.0, "dispatch_seconds": 0.1}),
               even_window(1, counters={"forward_seconds": 3.0, "dispatch_seconds": 0.9, "combine_seconds": 0.2})]
    signals = pool_state(TABLE, NUM_EXPERTS, windows).signals(windows)
    assert signals["all2all_share"] == pytest.approx(1.2 / 4.0)
    assert signals["imbalance"] == pytest.approx(1.0)  # every slot alike
    assert signals["mtp_acceptance"] is None and signals["dropped_share"] == 0.0


def test_a_knobs_inputs_are_the_load_of_the_last_minute_of_windows():
    num_windows = int(LOAD_SPAN_SECONDS // 10) + 3  # older windows than the span: left out
    hot = LOAD.copy()
    hot[:, 0] = 100.0
    windows = [even_window(i) for i in range(3)] + [loop_window(i, hot, np.full((2, 20), 4.0), num_reports=4)
                                               for i in range(3, num_windows)]
    pool = pool_state(TABLE, NUM_EXPERTS, windows, top_k=2, model_key=model_key({"experts": 16}), policy_version=3)
    inputs = pool.knob_inputs(with_expert_share=True)
    assert inputs.tokens_per_second == pytest.approx(hot[0].sum() / 2 / 10.0)  # layer 0 counts a token top_k times
    assert inputs.expert_share[0, 0] == pytest.approx(100.0 / hot[0].sum())
    assert (inputs.model, inputs.policy_version) == (model_key({"experts": 16}), 3)
    assert pool.knob_inputs(with_expert_share=False).expert_share is None


def test_the_token_rate_leaves_out_serving_windows_whose_load_was_not_measured():
    """An SGLang window whose dump did not come serves with no expert load counted: its tokens are unknown, not
    none, so the rate a knob's park compares on is the measured windows'; an idle window's zero is real."""
    measured = [even_window(i) for i in range(3)]
    no_dump = [loop_window(i, np.zeros_like(LOAD), np.zeros((2, 20)), num_reports=4,
                           counters={"requests_running": 3.0, "ttft_count": 10.0}) for i in range(3, 6)]
    idle = [loop_window(i, np.zeros_like(LOAD), np.zeros((2, 20)), num_reports=4) for i in range(6, 9)]
    rate = LOAD[0].sum() / 2 / 10.0
    assert not no_dump[0].is_load_measured and idle[0].is_load_measured and not idle[0].is_serving
    with_no_dump = pool_state(TABLE, NUM_EXPERTS, measured + no_dump, top_k=2)
    assert with_no_dump.knob_inputs(with_expert_share=False).tokens_per_second == pytest.approx(rate)
    with_idle = pool_state(TABLE, NUM_EXPERTS, measured + idle, top_k=2)
    assert with_idle.knob_inputs(with_expert_share=False).tokens_per_second == pytest.approx(rate / 2)
    only_no_dump = pool_state(TABLE, NUM_EXPERTS, no_dump, top_k=2)
    assert only_no_dump.knob_inputs(with_expert_share=False).tokens_per_second is None
