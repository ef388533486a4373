"""A Prometheus histogram fed a window's counts at once, for integer-valued observations.

The engine counts tokens by how many expert groups (or nodes) their top-k reached on the device, one
histogram per window; prometheus_client's `Histogram` takes one observation per call, which would be
a call per token. This collector keeps the cumulative counts and exposes them as a histogram family
(`_bucket{le}`, `_sum`, `_count`) whose buckets are the integers 1..max_value.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence

from prometheus_client import CollectorRegistry
from prometheus_client.core import HistogramMetricFamily
from prometheus_client.utils import floatToGoString


class CountHistogram:
    def __init__(self, registry: CollectorRegistry, name: str, documentation: str, const: dict[str, str],
                 max_value: int):
        """max_value: the largest value observed (top_k for groups per token); values are 0..max_value."""
        self.name, self.documentation, self.const = name, documentation, const
        self.counts = [0] * (max_value + 1)  # [max_value + 1] observations of each value so far
        self._lock = threading.Lock()  # the engine thread adds, the HTTP thread collects
        registry.register(self)

    def add(self, counts: Sequence[int]) -> None:
        """counts: observations of the values 0, 1, .. (one window's histogram); longer than max_value + 1
        is a caller's bug."""
        if len(counts) > len(self.counts):
            raise ValueError(f"{self.name}: {len(counts)} bins, room for {len(self.counts)}")
        with self._lock:
            for value, n in enumerate(counts):
                self.counts[value] += int(n)

    def describe(self) -> Iterator[HistogramMetricFamily]:
        yield HistogramMetricFamily(self.name, self.documentation, labels=list(self.const))

    def collect(self) -> Iterator[HistogramMetricFamily]:
        family = HistogramMetricFamily(self.name, self.documentation, labels=list(self.const))
        with self._lock:
            counts = list(self.counts)
        buckets, total = [], 0
        for value, n in enumerate(counts):
            total += n
            if value:  # le="1" holds the tokens whose every expert was dropped (0) too
                buckets.append((floatToGoString(value), total))
        buckets.append(("+Inf", total))
        family.add_metric(list(self.const.values()), buckets,
                          sum_value=sum(value * n for value, n in enumerate(counts)))
        yield family
