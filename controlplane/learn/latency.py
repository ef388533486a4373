"""Per-replica latency against load, fitted from stored replica windows (scikit-learn).

Prefill: TTFT (arrival to KV ready, queue included) of the requests a replica prefilled, against
the prompt tokens/s it was offered. Queue time grows as rho/(1-rho) with the utilisation rho, in units
of one prompt's service time. So the fit is TTFT_q = a + b * s * rho/(1-rho) + c * s, with s = prompt
tokens / capacity and non-negative a, b, c. Capacity (prompt tokens per busy second) is read from the
windows themselves. The form extrapolates to loads not yet seen, which a scale-down must predict.
Decode: ITL (per token) against the batch while the engine runs, KV tokens read and local-prefill tokens/s,
linear with non-negative coefficients, which is what a decode step costs. A window's batch and KV tokens are
averaged over the window, idle time included, and its tokens come only while it runs. So both are read per busy
second (a window idle half the time at one sequence is a batch of one, not half). Windows are weighted by the
token gaps they measured, so the fit is per token as Little's law reads it. Otherwise a mostly idle window's
one gap, a prefill stall included, would weigh as much as a busy window's hundreds.

Windows in which a prefill replica finished fewer than MIN_REQUESTS prompts are left out (their
percentiles are mostly noise); the others are weighted by their request count. Windows that begin
or end with more than MAX_BACKLOG_SECONDS of queued work are left out too: their requests waited out an earlier
overload, which says nothing about the steady state at this window's load. Kept, the windows draining a burst's
backlog read as a TTFT floor over a second, and prefill was sized for it for a quarter of an hour. A
replica's first `cold_start_windows` windows are left out (cold caches and kernels run slow and
would read as lost capacity). With fewer than `min_samples` warm windows a fit is None, and the
caller falls back (controlplane/plan/pools.py: reactive steps only, no consolidation).
Arrays are [n] over replica windows; seconds, tokens, tokens/s.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

import numpy as np
import sklearn
from sklearn.linear_model import LinearRegression

from controlplane.learn.prefill_queue import ttft_percentile
from controlplane.observed.pool import COLD_START_WINDOWS

MIN_SAMPLES = 12
MIN_REQUESTS = 20  # a replica window's TTFT percentiles over fewer requests are too noisy to learn from
MAX_BACKLOG_SECONDS = 3.0  # a prefill window ending with more queued work than this is draining an overload
MAX_UTILISATION = 0.97  # beyond it a queue grows without bound: predicted latency is infinite
PERCENTILES = (90, 99)


def _fit(features: np.ndarray, target: np.ndarray, weight: np.ndarray | None = None) -> tuple[float, np.ndarray]:
    """(intercept, coefficients), all non-negative. The intercept is a column of ones under the same
    constraint (sklearn leaves its own intercept free). With a feature that barely varies (a steady prompt
    length) the two are collinear, and a free intercept runs off to -inf against a huge coefficient."""
    ones = np.column_stack([np.ones(len(target)), features])
    # inputs are checked finite by the caller; the planner refits every window, so skip re-validation
    with sklearn.config_context(assume_finite=True, skip_parameter_validation=True):
        model = LinearRegression(positive=True, fit_intercept=False).fit(ones, target, sample_weight=weight)
    coef = np.asarray(model.coef_, dtype=np.float64)
    return float(coef[0]), coef[1:]


def _usable(age: np.ndarray, cold_start_windows: int, *columns: np.ndarray) -> np.ndarray:
    mask = np.asarray(age) >= cold_start_windows
    for column in columns:
        mask &= np.isfinite(np.asarray(column, dtype=np.float64))
    return mask


@dataclass(frozen=True)
class PrefillLatency:
    capacity: float  # prompt tokens per busy second
    coefficients: dict  # percentile -> (a, b, c)
    num_samples: int

    def ttft(self, percentile: int, tokens_per_second: float, mean_prompt_tokens: float,
             max_utilisation: float = MAX_UTILISATION) -> float:
        """TTFT at `percentile`; inf past `max_utilisation` of the capacity (a queue with no bound)."""
        rho = tokens_per_second / self.capacity
        if rho > max_utilisation or rho >= MAX_UTILISATION:
            return float("inf")
        a, b, c = self.coefficients[percentile]
        service = mean_prompt_tokens / self.capacity
        return a + b * service * rho / (1 - rho) + c * service

    def ttft_of_mix(self, percentile: int, request_rate: float, prompt_tokens, shares, replicas: int) -> float:
        """TTFT at `percentile` of `replicas` replicas offered `request_rate` requests/s whose prompts are
        `prompt_tokens` [K] in `shares` [K]. It is the queue of prefill_queue.py at this capacity. Each request's
        hand-off and step overhead is the fit's intercept (the latency a replica adds to any prompt, queue or not)."""
        service = np.asarray(prompt_tokens, np.float64) / self.capacity
        fitted = max((p for p in self.coefficients if p <= percentile), default=min(self.coefficients))
        return ttft_percentile(percentile, request_rate, service, shares, replicas, self.coefficients[fitted][0])


def fit_prefill(columns: Mapping[str, np.ndarray], window_seconds: float, *,
                cold_start_windows: int = COLD_START_WINDOWS, min_samples: int = MIN_SAMPLES) -> PrefillLatency | None:
    """Replica windows of the prefill pool -> PrefillLatency, or None with too few warm windows.

    `columns`: name -> [windows], named as in `PoolWindow.columns`. They are age_windows, prefill_tokens (prompt
    tokens), busy_seconds, num_prefilled, queued_tokens (at each window's end), ttft_p90 and ttft_p99. With them
    may come queued_before: prompt tokens queued at each window's start (absent: not known)."""
    age, ttft_p90, ttft_p99 = columns["age_windows"], columns["ttft_p90"], columns["ttft_p99"]
    prompt_tokens, busy_seconds = columns["prefill_tokens"], columns["busy_seconds"]
    num_prefilled, queued_tokens, queued_before = (columns["num_prefilled"], columns["queued_tokens"],
                                                   columns.get("queued_before"))
    tokens, busy = np.asarray(prompt_tokens, np.float64), np.asarray(busy_seconds, np.float64)
    count, queued = np.asarray(num_prefilled, np.float64), np.asarray(queued_tokens, np.float64)
    mask = _usable(age, cold_start_windows, ttft_p90, ttft_p99) & (count >= MIN_REQUESTS) & (busy > 0)
    if mask.sum() < min_samples:
        return None
    # capacity: prompt tokens per busy second on the busiest windows (small batches run a little slower)
    rate = tokens[mask] / busy[mask]
    busiest = busy[mask] >= np.quantile(busy[mask], 0.75)
    capacity = float(np.median(rate[busiest]))
    # a backlog left over from an overload is not the steady state this load would settle at, whether the window
    # ends with it or begins with it and drains it (its requests waited out the overload all the same)
    mask &= queued <= MAX_BACKLOG_SECONDS * capacity
    if queued_before is not None:
        mask &= np.asarray(queued_before, np.float64) <= MAX_BACKLOG_SECONDS * capacity
    if mask.sum() < min_samples:
        return None
    tokens, count = tokens[mask], count[mask]
    rho = np.minimum(tokens / window_seconds / capacity, MAX_UTILISATION)
    service = tokens / count / capacity
    features = np.column_stack([service * rho / (1 - rho), service])
    coefficients = {}
    for percentile, column in zip(PERCENTILES, (ttft_p90, ttft_p99), strict=True):
        a, (b, c) = _fit(features, np.asarray(column, np.float64)[mask], count)
        coefficients[percentile] = (a, b, c)
    return PrefillLatency(capacity, coefficients, int(mask.sum()))


@dataclass(frozen=True)
class DecodeLatency:
    """ITL of a running decode engine: batch and KV tokens are those of its steps (one sequence at least)."""

    coefficients: dict  # "mean" | 90 | 99 -> (intercept, per sequence, per KV token, per local-prefill token/s)
    num_samples: int

    def itl(self, statistic, batch: float, kv_tokens: float, local_tokens_per_second: float = 0.0) -> float:
        a, per_sequence, per_kv, per_local = self.coefficients[statistic]
        return a + per_sequence * batch + per_kv * kv_tokens + per_local * local_tokens_per_second


def fit_decode(columns: Mapping[str, np.ndarray], window_seconds: float, *,
               cold_start_windows: int = COLD_START_WINDOWS, min_samples: int = MIN_SAMPLES) -> DecodeLatency | None:
    """Replica windows of the decode pool -> DecodeLatency, or None with too few warm windows.

    `columns`: name -> [windows], named as in `PoolWindow.columns`. They are age_windows, batch, kv_tokens,
    prefill_tokens (prompt tokens prefilled locally), itl_mean, itl_p90 and itl_p99. With them may come
    itl_count, the token gaps each window's ITL was measured over: the fit's weights (absent: equal). And
    busy_seconds, the time each window ran steps (absent: busy throughout)."""
    age, batch, kv_tokens, local_prompt_tokens = (columns["age_windows"], columns["batch"], columns["kv_tokens"],
                                                  columns["prefill_tokens"])
    itl_mean, itl_p90, itl_p99 = columns["itl_mean"], columns["itl_p90"], columns["itl_p99"]
    num_gaps, busy_seconds = columns.get("itl_count"), columns.get("busy_seconds")
    batch = np.asarray(batch, np.float64)
    mask = _usable(age, cold_start_windows, itl_mean, itl_p90, itl_p99) & (batch > 0)
    if mask.sum() < min_samples:
        return None
    running = np.ones_like(batch)  # share of the window the engine ran steps
    if busy_seconds is not None:
        busy = np.asarray(busy_seconds, np.float64)
        running = np.where(busy > 0, np.minimum(busy / window_seconds, 1.0), 1.0)
    features = np.column_stack([batch / running, np.asarray(kv_tokens, np.float64) / running,
                                np.asarray(local_prompt_tokens, np.float64) / window_seconds])[mask]
    weight = None if num_gaps is None else np.asarray(num_gaps, np.float64)[mask]
    coefficients = {}
    for statistic, column in zip(("mean", *PERCENTILES), (itl_mean, itl_p90, itl_p99), strict=True):
        a, coef = _fit(features, np.asarray(column, np.float64)[mask], weight)
        coefficients[statistic] = (a, *coef.tolist())
    return DecodeLatency(coefficients, int(mask.sum()))


@dataclass(frozen=True)
class PoolLatency:
    """Both pools' fits behind one object (the LatencyModel shape of controlplane/solve/pools/capacity.py).

    A pool without a fit answers None.
    `kv_capacity_tokens`, `max_batch`: one decode replica's limits.
    `max_prefill_utilisation`: past it, a prefill replica's TTFT is planned as unbounded where only the mean
    prompt is known.
    `prefill_tail_percentile`: where the length mix is known, the percentile of TTFT its tail is read at."""

    prefill: PrefillLatency | None
    decode: DecodeLatency | None
    kv_capacity_tokens: float
    max_batch: int
    max_prefill_utilisation: float = MAX_UTILISATION
    prefill_tail_percentile: float | None = None  # see prefill_tail

    def prefill_ttft(self, percentile: int, tokens_per_second: float, mean_prompt_tokens: float,
                     mix: tuple | None = None, replicas: int = 1) -> float | None:
        """mix: (prompt tokens [K], shares [K]) of the prompts the pool prefills, known from the router's length
        buckets: the queue of the mix, no utilisation ceiling; None: the fit at the mean, under the ceiling."""
        if self.prefill is None:
            return None
        if mix is not None:
            tokens, shares = mix
            rate = tokens_per_second * replicas / max(float(np.dot(tokens, shares) / np.sum(shares)), 1e-9)
            return self.prefill.ttft_of_mix(percentile, rate, tokens, shares, replicas)
        return self.prefill.ttft(percentile, tokens_per_second, mean_prompt_tokens, self.max_prefill_utilisation)

    def prefill_tail(self, tokens_per_second: float, mix: tuple | None, replicas: int) -> float | None:
        """TTFT at `prefill_tail_percentile` of the mix (the longest prompts that wait); None without a mix, a
        tail percentile or a prefill fit."""
        if mix is None or self.prefill_tail_percentile is None or self.prefill is None:
            return None
        return self.prefill_ttft(self.prefill_tail_percentile, tokens_per_second, 0.0, mix, replicas)

    def with_prefill_limits(self, max_utilisation: float, tail_percentile: float | None) -> PoolLatency:
        return replace(self, max_prefill_utilisation=max_utilisation, prefill_tail_percentile=tail_percentile)

    def decode_itl(self, statistic, batch: float, kv_tokens: float, local_tokens_per_second: float) -> float | None:
        return None if self.decode is None else self.decode.itl(statistic, batch, kv_tokens, local_tokens_per_second)
