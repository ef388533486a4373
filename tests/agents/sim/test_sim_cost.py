"""The one step-cost model (agents/sim/cost.py): the busiest GPU sets the pace, and only rows that cross
GPUs pay for the all-to-all."""

from __future__ import annotations

import numpy as np
import pytest

from agents.sim.cost import remote_share, routing_effect, step_times


def test_the_busiest_gpu_sets_the_pace():
    even = step_times(np.full((4, 8), 100.0), num_tokens=200, remote_share=0.5)
    skewed_rows = np.full((4, 8), 100.0)
    skewed_rows[:, 0], skewed_rows[:, 1] = 150.0, 50.0  # same total rows, one GPU hotter
    skewed = step_times(skewed_rows, num_tokens=200, remote_share=0.5)
    assert skewed.forward_seconds > even.forward_seconds
    assert skewed.dispatch_seconds == pytest.approx(1.5 * even.dispatch_seconds)
    assert even.dispatch_seconds == even.combine_seconds > 0


def test_no_remote_rows_no_all_to_all():
    alone = step_times(np.full((4, 1), 100.0), num_tokens=100, remote_share=remote_share(1, None, 8, 6))
    assert alone.dispatch_seconds == alone.combine_seconds == 0 and alone.forward_seconds > 0


def test_more_ranks_send_more_rows_away_and_a_group_limit_keeps_them_closer():
    assert remote_share(2, None, 8, 6) == pytest.approx(0.5)
    assert remote_share(8, None, 8, 6) == pytest.approx(7 / 8)
    shares = [remote_share(8, g, 8, 6) for g in (1, 2, 3, 8)]
    assert shares == sorted(shares) and shares[0] < shares[-1]


def test_a_tighter_group_limit_costs_recall():
    free_factor, free_recall = routing_effect(None, 8, 6)
    assert free_factor == pytest.approx(1.0) and free_recall == pytest.approx(1.0)
    recalls = [routing_effect(g, 8, 6)[1] for g in (1, 2, 3, 4)]
    assert recalls == sorted(recalls) and recalls[0] < 0.8
