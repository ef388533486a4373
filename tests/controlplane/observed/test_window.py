"""One pool's window as the loop reads it (controlplane/observed/window.py): the straggler factor only from a
complete slot load, the counters' ratios only where their denominator was measured."""

from __future__ import annotations

import numpy as np
import pytest
from support.pool_states import every_rank_reported, loop_window

from controlplane.observed.window import (
    ACCEPTED_AT,
    GROUPS_AT,
    RANK_REPORTS,
    acceptance_by_position,
    dropped_share,
    expert_share,
)

# 2 GPUs of 2 slots, one MoE layer: GPU 0 processed 300 tokens, GPU 1 100 -> max/mean 300/200
SLOTS = np.array([[200.0, 100.0, 60.0, 40.0]])
EXPERTS = np.array([[250.0, 100.0, 50.0]])


def test_the_imbalance_is_max_over_mean_gpu_load_once_every_rank_reported_alike():
    assert loop_window(0, EXPERTS, SLOTS, num_reports=2, counters=every_rank_reported(2)).imbalance(2) \
        == pytest.approx(1.5)
    # a rank that did not report would read as an idle GPU; a rank reported twice as a doubled one
    assert loop_window(0, EXPERTS, SLOTS, counters={f"{RANK_REPORTS}0": 1}).imbalance(2) is None
    unequal = every_rank_reported(2) | {f"{RANK_REPORTS}1": 2}
    assert loop_window(0, EXPERTS, SLOTS, counters=unequal).imbalance(2) is None
    assert loop_window(0, EXPERTS, SLOTS, counters=unequal).layer_imbalance(2) is None


def test_a_window_whose_slot_load_misses_most_of_its_expert_load_is_not_under_its_placement():
    assert loop_window(0, EXPERTS, SLOTS).is_mostly_under_its_placement()
    assert not loop_window(0, EXPERTS * 3, SLOTS).is_mostly_under_its_placement()  # switched late in the window


def test_ratios_need_their_denominator():
    timed = loop_window(0, EXPERTS, SLOTS, counters={"forward_seconds": 2.0, "dispatch_seconds": 0.3,
                                                     "combine_seconds": 0.1})
    assert timed.all2all_share == pytest.approx(0.2)
    assert loop_window(0, EXPERTS, SLOTS, counters={"dispatch_seconds": 0.3}).all2all_share is None
    assert timed.ratio("dispatch_seconds", "forward_seconds") == pytest.approx(0.15)
    assert timed.ratio("dispatch_seconds", "missing") is None
    assert timed.step_imbalance() is None  # no agent measured the step load


def test_groups_reached_read_as_a_histogram_by_count():
    window = loop_window(0, EXPERTS, SLOTS, counters={f"{GROUPS_AT}1": 5.0, f"{GROUPS_AT}3": 2.0})
    assert window.per_token(GROUPS_AT).tolist() == [0.0, 5.0, 0.0, 2.0]
    assert loop_window(0, EXPERTS, SLOTS).per_token(GROUPS_AT) is None  # agents from before the measure


def test_acceptance_is_per_draft_at_each_position_pooled_over_windows():
    first = {"spec_drafts": 100, f"{ACCEPTED_AT}0": 80, f"{ACCEPTED_AT}1": 40}
    second = {"spec_drafts": 300, f"{ACCEPTED_AT}0": 120, f"{ACCEPTED_AT}1": 60}
    windows = [loop_window(0, EXPERTS, SLOTS, counters=first), second]  # a Window or its counters
    assert acceptance_by_position(windows) == [0.5, 0.25]
    assert acceptance_by_position([{"spec_drafts": 0}]) == []


def test_the_dropped_share_is_of_the_assignments_routed():
    windows = [loop_window(i, EXPERTS, SLOTS, counters={"dropped_tokens": 40.0}) for i in range(2)]
    assert dropped_share(windows) == pytest.approx(80.0 / 800.0)
    assert dropped_share([loop_window(0, np.zeros((1, 3)), SLOTS)]) is None


def test_expert_share_rows_sum_to_one_and_an_empty_layer_stays_empty():
    share = expert_share(np.array([[3.0, 1.0], [0.0, 0.0]]))
    assert share.tolist() == [[0.75, 0.25], [0.0, 0.0]]
