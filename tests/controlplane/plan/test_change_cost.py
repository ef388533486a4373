"""A pool's change cost folded from its windows' timed acts (a running mean that skips windows already in it),
and what a change is priced at: the measure once there is one, else the engine's prior."""

from __future__ import annotations

import numpy as np
import pytest

from controlplane.observed.measured_cost import MeasuredCost, fold_windows
from controlplane.observed.window import Window
from controlplane.plan.change_cost import change_cost
from controlplane.plan.change_price import ENGINE_PRIORS


def window(index: int, events: float = 0.0, seconds: float = 0.0) -> Window:
    counters = {"balancer_stall_events": events, "balancer_stall_seconds": seconds} if events else {}
    return Window(index=index, start=index * 5.0, seconds=5.0, placement_version=1, num_reports=1,
                  num_slot_reports=1, expert_tokens=np.ones((1, 4)), slot_tokens=np.ones((1, 4)), counters=counters)


def test_timed_acts_fold_into_a_running_mean_once_each():
    # four ranks switched in window 3 (0.2 s each), four again in window 7 (0.4 s each)
    windows = [window(i) for i in range(10)]
    windows[3], windows[7] = window(3, 4, 0.8), window(7, 4, 1.6)
    measured = fold_windows(None, windows[:5])
    assert measured == MeasuredCost(4, pytest.approx(0.2), pytest.approx(0.2), 3)
    again = fold_windows(measured, windows)  # window 3 is in it already: only window 7 is added
    assert again.num_measured == 8 and again.mean_seconds == pytest.approx(0.3)
    assert again.last_seconds == pytest.approx(0.4) and again.last_window_index == 7
    assert fold_windows(again, windows) == again  # nothing new
    assert fold_windows(None, [window(0), window(1)]) is None  # no act timed: nothing measured


def test_a_change_is_priced_at_the_measure_once_there_is_one():
    assert change_cost("sglang", None) == ENGINE_PRIORS["sglang"]
    assert change_cost("unknown", None) == ENGINE_PRIORS["bundled"]
    cost = change_cost("bundled", MeasuredCost(8, 0.3, 0.4, 7))
    assert cost.stall_seconds == 0.3 and cost.source == "measured: mean of 8 placement switches on this deployment"
