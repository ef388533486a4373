"""A post's share of its pool's window (controlplane/observed/report.py): counters add up, percentiles keep
their worst, and a post's slot columns say which ranks it carries."""

from __future__ import annotations

import numpy as np

from controlplane.observed.report import Report, add_counters, merge_counters


def test_counters_sum_but_a_percentile_keeps_the_worst():
    total = {"ttft_count": 3.0, "ttft_p99": 0.5}
    merged = merge_counters(total, {"ttft_count": 2.0, "ttft_p99": 0.4, "spec_drafts": 7.0})
    assert merged == {"ttft_count": 5.0, "ttft_p99": 0.5, "spec_drafts": 7.0}
    assert total == {"ttft_count": 3.0, "ttft_p99": 0.5}  # merge leaves its input alone
    assert add_counters(total, {"ttft_p99": 0.9}, {"ttft_p99": 0.7}) is total and total["ttft_p99"] == 0.9


def test_a_post_of_two_ranks_at_slot_12_carries_ranks_3_and_4():
    report = Report(window_index=0, expert_tokens=np.zeros((2, 8)), slot_tokens=np.zeros((2, 8)), slot_offset=12,
                    counters={}, rank_versions=(1, 1))
    assert report.slots_per_rank == 4 and report.first_rank == 3
