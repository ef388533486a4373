"""A pool's change cost folded from its windows' timed acts (controlplane/observed/measured_cost.py): a running
mean that skips windows already in it."""

from __future__ import annotations

import numpy as np
import pytest
from support.pool_states import loop_window

from controlplane.observed.measured_cost import MeasuredCost, fold_windows
from controlplane.observed.window import Window


def stall_window(index: int, events: float = 0.0, seconds: float = 0.0) -> Window:
    """5 s under placement 1 whose balancer stalled `events` times for `seconds` in all (none: no counters)."""
    counters = {"balancer_stall_events": events, "balancer_stall_seconds": seconds} if events else {}
    return loop_window(index, np.ones((1, 4)), np.ones((1, 4)), version=1, seconds=5.0, counters=counters)


def test_timed_acts_fold_into_a_running_mean_once_each():
    # four ranks switched in window 3 (0.2 s each), four again in window 7 (0.4 s each)
    windows = [stall_window(i) for i in range(10)]
    windows[3], windows[7] = stall_window(3, 4, 0.8), stall_window(7, 4, 1.6)
    measured = fold_windows(None, windows[:5])
    assert measured == MeasuredCost(4, pytest.approx(0.2), pytest.approx(0.2), 3)
    again = fold_windows(measured, windows)  # window 3 is in it already: only window 7 is added
    assert again.num_measured == 8 and again.mean_seconds == pytest.approx(0.3)
    assert again.last_seconds == pytest.approx(0.4) and again.last_window_index == 7
    assert fold_windows(again, windows) == again  # nothing new
    assert fold_windows(None, [stall_window(0), stall_window(1)]) is None  # no act timed: nothing measured
