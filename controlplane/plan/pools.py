"""The controller's pool planner: learn from the windows, then decide with solve.pools. Pure.

Each call refits the per-replica latency model from the last `model_windows` windows (cold-start
windows left out, learn/latency.py). On predictive ticks only, it also forecasts request rate, prompt
and output length per `bucket_seconds` bucket, with the backtest-chosen candidate (learn/forecast.py). For
scaling up the forecast spans `horizon_seconds` (a replica's startup plus one predictive interval). For scaling
down it spans `hold_seconds`: startup plus the cooldown, since a pool scaled down cannot scale up again within it.
It plans for the peak forecast rate plus a surge margin of backtest errors,
never below the rate measured now surely is (solve/pools/load.py sure_rate); the prompt-length mix
(solve/pools/load.py remote_mix) is the measured one, its lengths scaled with the forecast mean.
`targets_of` and `rules_of` read the deployment's policy.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import numpy as np

from controlplane.desired import LatencySlo, Policy
from controlplane.learn.forecast import forecast_series
from controlplane.learn.latency import COLD_START_WINDOWS, MIN_SAMPLES, PoolLatency, fit_decode, fit_prefill
from controlplane.observed.serving import PoolWindow
from controlplane.solve.pools.capacity import LoadForecast
from controlplane.solve.pools.load import load_series, measured_load, sure_rate
from controlplane.solve.pools.planner import is_predictive_tick, plan_pools
from controlplane.solve.pools.planning import PoolDecisions
from controlplane.solve.pools.rules import PoolRules
from controlplane.solve.pools.view import PoolsView, SloTarget


def targets_of(slo: LatencySlo) -> tuple[SloTarget, ...]:
    """The policy's latency targets as the pool planner reads them."""
    return tuple(SloTarget(metric, percentile, seconds)
                 for metric in ("ttft", "itl") for percentile in (90, 99)
                 if (seconds := getattr(slo, f"{metric}_p{percentile}_seconds")) is not None)


def rules_of(policy: Policy, rules: PoolRules = PoolRules()) -> PoolRules:
    """`rules` with the policy's cooldown, predictive interval and prefill sizing."""
    return replace(rules, cooldown_seconds=policy.pool_cooldown_seconds,
                   predictive_interval_seconds=policy.pool_predictive_interval_seconds,
                   size_prefill_by_mix=policy.pool_size_prefill_by_mix,
                   threshold=replace(rules.threshold, cooldown_seconds=policy.pool_cooldown_seconds))


def _queued_before(windows: tuple[PoolWindow, ...]) -> np.ndarray:
    """[prefill replica windows, in `columns` order] prompt tokens queued on the replica when each window began:
    its previous window's end (0 in its first)."""
    out, last = [], {}
    for w in windows:
        mine = w.of_role("prefill")
        out.extend(last.get(r.replica, 0.0) for r in mine)
        last = {r.replica: r.queued_tokens for r in mine}
    return np.asarray(out, np.float64)


def fit_latency(windows: tuple[PoolWindow, ...], cold_start_windows: int = COLD_START_WINDOWS,
                min_samples: int = MIN_SAMPLES) -> PoolLatency | None:
    """Per-replica latency of both pools from the replica windows; None before any decode replica reported."""
    decode_windows = [w for w in windows if w.of_role("decode")]
    if not decode_windows:
        return None
    window_seconds = float(np.median([w.seconds for w in windows]))

    def stacked(role: str) -> dict[str, np.ndarray]:
        tables = [w.columns[role] for w in windows]
        return {name: np.concatenate([t[name] for t in tables]) for name in tables[0]}

    p, d = stacked("prefill"), stacked("decode")
    prefill = fit_prefill(p | {"queued_before": _queued_before(windows)}, window_seconds,
                          cold_start_windows=cold_start_windows, min_samples=min_samples)
    decode = fit_decode(d, window_seconds, cold_start_windows=cold_start_windows, min_samples=min_samples)
    latest = decode_windows[-1].of_role("decode")[-1]
    return PoolLatency(prefill, decode, latest.kv_capacity_tokens, latest.max_batch)


@dataclass(frozen=True)
class ForecastSpans:
    """How far ahead the pool planner forecasts its load, on which grid, and with how much headroom."""

    bucket_seconds: float = 30.0
    horizon_seconds: float = 300.0  # a replica's startup plus one predictive interval
    hold_seconds: float = 420.0  # a replica's startup plus the cooldown in which a scale-down cannot be undone
    surge: float = 0.5  # backtest errors of headroom over the forecast peak
    num_folds: int = 12  # cut points the rate forecast is backtested on: the last six minutes' surprises


def forecast_load(windows: tuple[PoolWindow, ...], now_load: LoadForecast, spans: ForecastSpans,
                  warm_window: tuple[float, float] | None = None) -> LoadForecast:
    """The load to plan for.

    The rate is the peak forecast rate over `horizon_seconds` plus `surge` x the forecaster's backtest error
    over `num_folds` cut points (`spans`). (That is an upper prediction bound: wide where traffic has surprised
    it, narrow where it has not.) It is never under the rate measured now surely is (`now_load.surely`).
    `hold_rate`: the same over `hold_seconds`, from the highest of the plausible candidates (a scale-down must
    be safe even if the chosen one is wrong).
    `warm_rate`: the same over `warm_window` (seconds from now in which replicas asked for now warm up).
    With them come the forecast mean lengths and the measured remote/local split."""
    bucket_seconds, surge = spans.bucket_seconds, spans.surge
    rate, prompt, output = load_series(windows, bucket_seconds)
    if rate.size == 0:
        return now_load
    horizon = max(1, int(np.ceil(spans.horizon_seconds / bucket_seconds)))
    hold = max(horizon, int(np.ceil(spans.hold_seconds / bucket_seconds)))
    rate_ahead = forecast_series(rate, hold, spans.num_folds)
    prompt_ahead = forecast_series(prompt, horizon).values
    output_ahead = forecast_series(output, horizon).values
    error = 0.0 if np.isnan(rate_ahead.error) else rate_ahead.error
    # never under the rate measured now, as far as its counts surely exceed it: 20 s hold a few hundred arrivals, a
    # few percent of noise, and with the raw count as the floor that noise moved a flat load's pools up for the
    # forecast minutes (Run 6 of benchmarks/results/pools-2026-11-30.md); a scale-down still carries the whole
    # measured rate (solve/pools/planner.py)
    floor = now_load.surely
    peak = max(float(rate_ahead.values[:horizon].max()) + surge * error, floor)
    held = max(float(rate_ahead.upper.max()) + surge * error, floor)
    warm = None
    if warm_window is not None:
        first = min(int(warm_window[0] // bucket_seconds), hold - 1)
        last = min(max(first + 1, int(np.ceil(warm_window[1] / bucket_seconds))), hold)
        warm = max(float(rate_ahead.values[first:last].max()) + surge * error, floor)
    scale = float(prompt_ahead.max() / prompt[-1]) if prompt[-1] > 0 else 1.0
    return LoadForecast(peak, now_load.remote_share, now_load.remote_prompt_tokens * scale,
                        now_load.local_prompt_tokens * scale, max(float(output_ahead.max()), 1.0),
                        spans.horizon_seconds,
                        f"{rate_ahead.method}+{surge:g}x{error:.1f}", is_backtested=rate_ahead.is_backtested,
                        hold_rate=held, warm_rate=warm,
                        remote_mix=None if now_load.remote_mix is None else now_load.remote_mix.scaled(scale))


# the load "now" (what the reactive step sizes for) is a rate over at least this long: over a few seconds it
# counts a handful of arrivals, and with 2 s windows one window that two requests fall into reads as double the rate
MIN_LOAD_SECONDS = 20.0


def planner_for(policy: Policy, window_seconds: float, startup_seconds: float) -> MoectlPoolPlanner:
    """The planner for a deployment's policy on a platform whose new replicas serve `startup_seconds` after
    they are asked for.

    Its horizons follow the policy's predictive interval and cooldown, and its forecast buckets are three
    windows. Its load "now" spans at least MIN_LOAD_SECONDS. (The defaults below are these for 10 s windows
    and a 120 s startup.)"""
    rules = replace(rules_of(policy), startup_seconds=startup_seconds)
    spans = ForecastSpans(bucket_seconds=3 * window_seconds,
                          horizon_seconds=startup_seconds + rules.predictive_interval_seconds,
                          hold_seconds=startup_seconds + rules.cooldown_seconds)
    return MoectlPoolPlanner(rules=rules, spans=spans, startup_seconds=startup_seconds,
                             load_windows=max(2, math.ceil(MIN_LOAD_SECONDS / window_seconds)))


@dataclass(frozen=True)
class MoectlPoolPlanner:
    name: str = "moectl"
    rules: PoolRules = field(default_factory=PoolRules)
    model_windows: int = 180
    spans: ForecastSpans = field(default_factory=ForecastSpans)
    startup_seconds: float = 120.0  # a replica asked for now serves this much later
    load_windows: int = 2  # the load "now" is measured over this many windows
    rate_noise_sigmas: float = 1.0  # a reactive step without a breach acts on the rate less this many standard errors

    def plan(self, view: PoolsView) -> PoolDecisions:
        recent = view.windows[-self.model_windows:]
        model = fit_latency(recent, self.rules.cold_start_windows)
        now_load = measured_load(view.windows, self.load_windows)
        if now_load is not None:
            now_load = replace(now_load, sure_rate=sure_rate(view.windows, self.load_windows, self.rate_noise_sigmas))
        forecast = None
        latest = view.latest
        if latest is not None and now_load is not None and \
                is_predictive_tick(view.now, latest.seconds, self.rules.predictive_interval_seconds):
            forecast = forecast_load(view.windows, now_load, self.spans,
                                     (self.startup_seconds,
                                      self.startup_seconds + self.rules.cold_start_windows * latest.seconds))
        return plan_pools(view, model, now_load, forecast, self.rules)
