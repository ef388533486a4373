"""A snapshot's additive share of its window: its counters and where its slot load goes."""

from __future__ import annotations

import numpy as np
from support.store import SLOTS_PER_RANK, snapshot

from agents.protocol import LatencySummary
from controlplane.collect.aggregate import to_report
from controlplane.observed.report import merge_counters
from controlplane.observed.window import ACCEPTED_AT, GROUPS_AT, NODES_AT


def test_a_report_carries_sums_and_lands_at_its_ranks_slots():
    s = snapshot(window_start=1_800_000_004.0, rank=1, forward_seconds=2.5, spec_drafts=10, spec_draft_tokens=20,
                 spec_accepted_tokens=10, spec_accepted_by_position=[7, 3],
                 ttft=LatencySummary(count=4, sum=2.0, p99=0.9), routing_recall=0.95)
    report = to_report(s, 10.0)
    assert report.window_index == 180_000_000 and report.slot_offset == SLOTS_PER_RANK  # the window holding its start
    np.testing.assert_array_equal(report.slot_tokens, s.slot_tokens.to_numpy())
    c = report.counters
    assert (c["forward_seconds"], c["ttft_count"], c["ttft_sum"], c["ttft_p99"]) == (2.5, 4, 2.0, 0.9)
    assert (c["routing_recall_sum"], c["routing_recall_count"]) == (0.95, 1)
    assert (c[f"{ACCEPTED_AT}0"], c[f"{ACCEPTED_AT}1"]) == (7.0, 3.0)
    assert to_report(snapshot(window_start=1_800_000_000.0), 10.0).counters["routing_recall_count"] == 0


def test_groups_and_nodes_per_token_become_window_counters_an_old_agent_leaves_out():
    s = snapshot(window_start=1_800_000_000.0, routing_groups_per_token=[0, 3, 9], routing_nodes_per_token=[1, 11])
    c = to_report(s, 10.0).counters
    assert [c[f"{GROUPS_AT}{n}"] for n in range(3)] == [0, 3, 9] and [c[f"{NODES_AT}{n}"] for n in range(2)] == [1, 11]
    old = to_report(snapshot(window_start=1_800_000_000.0), 10.0).counters
    assert not any(k.startswith((GROUPS_AT, NODES_AT)) for k in old)


def test_counters_add_and_percentiles_keep_the_worst():
    total = merge_counters({"forward_seconds": 1.0, "ttft_p99": 0.5}, {"forward_seconds": 2.0, "ttft_p99": 0.25,
                                                                      "itl_count": 3})
    assert total == {"forward_seconds": 3.0, "ttft_p99": 0.5, "itl_count": 3}
