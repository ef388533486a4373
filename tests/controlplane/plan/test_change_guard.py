"""The guard on a placement change (controlplane/plan/change_guard.py), pure: MTP acceptance and mean TTFT
compared between the windows a change was planned on and those under it, each against its tolerance, with enough
of a sample on both sides. Through the loop: tests/controlplane/loop/test_change_guard_loop.py."""

from __future__ import annotations

import numpy as np
from support.pool_states import loop_window

from controlplane.observed.window import Window
from controlplane.plan.change_guard import guard_change


def window(index: int, accepted: float, ttft_mean: float, num_requests: int = 200) -> Window:
    counters = {"spec_accepted_tokens": accepted * 1000, "spec_draft_tokens": 1000.0,
                "ttft_sum": ttft_mean * num_requests, "ttft_count": float(num_requests)}
    return loop_window(index, np.ones((1, 4)), np.ones((1, 4)), version=1, seconds=5.0, counters=counters)


def test_the_guard_compares_each_signal_against_its_tolerance():
    before = [window(0, 0.8, 0.2), window(1, 0.8, 0.2)]
    kept = guard_change(before, [window(2, 0.78, 0.24)], mtp_tolerance=0.05, latency_tolerance=0.25)
    assert not kept.is_breached and kept.measured["mtp_acceptance"] == {"before": 0.8, "after": 0.78}
    slower = guard_change(before, [window(2, 0.8, 0.3)], mtp_tolerance=0.05, latency_tolerance=0.25)
    assert slower.is_breached and "ttft mean seconds rose from 0.200 to 0.300" in slower.reason
    few = guard_change(before, [window(2, 0.8, 0.3, num_requests=5)], mtp_tolerance=0.05, latency_tolerance=0.25)
    assert not few.is_breached and "ttft_mean_seconds" not in few.measured  # 5 requests say nothing
    dropped = guard_change(before, [window(2, 0.7, 0.2)], mtp_tolerance=0.05, latency_tolerance=0.25)
    assert dropped.is_breached and "mtp acceptance fell from 0.800 to 0.700" in dropped.reason
    # a fall past the tolerance (5.6%) but within chance: 3 standard errors of the difference on 2000 and 1000
    # draft tokens are ~0.048
    chance = guard_change(before, [window(2, 0.755, 0.2)], mtp_tolerance=0.05, latency_tolerance=0.25)
    assert not chance.is_breached and chance.measured["mtp_acceptance"]["after"] == 0.755
