"""The serving windows as the pool planner reads them (controlplane/observed/serving.py): counters merged (sums,
the worst percentile, one clock), a pool window that says nothing of arrivals without a router, and the replica
columns with latencies NaN where not measured."""

from __future__ import annotations

import numpy as np
import pytest

from agents.protocol import NUM_PROMPT_BUCKETS
from controlplane.observed.serving import merge, pool_window, prompt_buckets, replica_window, summary


def test_merge_sums_counts_and_keeps_the_worst_percentile_and_one_clock():
    merged = merge({"ttft_count": 2, "ttft_p99": 0.3, "busy_seconds": 4.0},
                   {"ttft_count": 3, "ttft_p99": 0.5, "busy_seconds": 3.0, "num_arrivals": 7})
    assert merged == {"ttft_count": 5, "ttft_p99": 0.5, "busy_seconds": 4.0, "num_arrivals": 7}


def test_a_distribution_with_nothing_measured_is_none_not_empty():
    assert summary({"ttft_count": 0, "ttft_sum": 0.0}, "ttft") is None
    measured = summary({"ttft_count": 4, "ttft_sum": 2.0, "ttft_p99": 0.9}, "ttft")
    assert (measured.count, measured.sum, measured.p99, measured.p50) == (4, 2.0, 0.9, None)


def test_prompt_buckets_only_when_every_arrival_was_counted_in_one():
    counted = {"num_arrivals": 5, "prompt_bucket_0": 3, f"prompt_bucket_{NUM_PROMPT_BUCKETS - 1}": 2}
    assert sum(prompt_buckets(counted)) == 5 and len(prompt_buckets(counted)) == NUM_PROMPT_BUCKETS
    assert prompt_buckets(counted | {"num_arrivals": 6}) is None  # a router that does not count them posted too
    assert prompt_buckets({}) is None


def test_a_window_no_router_reported_knows_no_arrivals():
    replicas = (replica_window("d-0", "decode", 0, {"busy_seconds": 1.5, "itl_count": 10, "itl_sum": 0.3}),
                replica_window("p-0", "prefill", 7, {"busy_seconds": 2.0}))
    unknown = pool_window(100.0, 10.0, None, replicas)
    assert unknown.num_arrivals is None and unknown.ttft is None and unknown.of_role("prefill") == replicas[1:]
    router = {"num_arrivals": 4, "num_finished": 2, "input_tokens": 400.0, "output_tokens": 60.0, "num_local": 1}
    known = pool_window(100.0, 10.0, router, replicas)
    assert (known.mean_input_tokens, known.mean_output_tokens, known.local_prefill_share) == (100.0, 30.0, 0.25)
    decode = known.columns["decode"]
    assert decode["itl_mean"][0] == pytest.approx(0.03) and decode["itl_count"][0] == 10.0
    assert np.isnan(decode["ttft_mean"][0])  # not measured: NaN, never 0
    assert known.columns["prefill"]["age_windows"].tolist() == [7.0]
