"""A latency distribution over one window, from two reads of a cumulative Prometheus histogram."""

from __future__ import annotations

import math

from agents.protocol import MAX_SECONDS, LatencySummary


def quantile(q: float, buckets: dict[float, float]) -> float | None:
    """q in (0, 1); buckets: upper bound (seconds) -> cumulative count over the window, ascending, +inf last.

    Linear within the bucket holding the q-th observation, as PromQL's histogram_quantile; the +inf bucket
    answers its lower bound (the largest finite one). None when the window observed nothing.
    """
    bounds = list(buckets)
    if not bounds or buckets[bounds[-1]] <= 0:
        return None
    rank = q * buckets[bounds[-1]]
    lower_bound, lower_count = 0.0, 0.0
    for bound in bounds:
        count = buckets[bound]
        if count >= rank:
            if math.isinf(bound):
                return lower_bound
            width = count - lower_count
            return lower_bound + (bound - lower_bound) * ((rank - lower_count) / width if width > 0 else 1.0)
        lower_bound, lower_count = bound, count
    return lower_bound


def window_summary(before: dict[float, float], after: dict[float, float], sum_before: float,
                   sum_after: float) -> LatencySummary:
    """Two reads of one histogram (cumulative counts per bound, and `_sum` seconds) -> what the window between
    them observed. An engine restart (counts going down) reads as a fresh start: everything in `after`."""
    is_reset = any(after.get(bound, 0.0) < count for bound, count in before.items())
    base = {} if is_reset else before
    delta = {bound: max(0.0, count - base.get(bound, 0.0)) for bound, count in after.items()}
    total = delta.get(math.inf, max(delta.values(), default=0.0))
    if total <= 0:
        return LatencySummary()
    seconds = min(MAX_SECONDS, max(0.0, sum_after - (0.0 if is_reset else sum_before)))
    p50, p90, p99 = (quantile(q, delta) for q in (0.5, 0.9, 0.99))
    return LatencySummary(count=int(total), sum=seconds, p50=p50, p90=p90, p99=p99)
