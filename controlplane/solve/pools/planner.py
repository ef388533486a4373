"""Replicas per pool (prefill, decode) against TTFT and ITL targets. Pure: view, model and loads in, plan out.

Every window:
- Hold: both pools when the latest window is stale or a needed measurement is missing (never read
  as zero load). Also a pool that fewer than a quorum of its ready replicas reported for.
- Reactive (reactive.py): a measured percentile over its target adds one replica to the pool
  that caused it. For TTFT that is the prefill pool when its replicas' own TTFT is over target or decode is not
  short of KV room, and the decode pool when requests wait for KV room. For ITL and local-prefill TTFT it is the
  decode pool. When the model says the load measured now, backlog included, needs more
  replicas than the pool has, the pool goes there at once, without waiting for the breach.
Every `predictive_interval_seconds`, on the clock's grid:
- Predictive: the fewest replicas whose predicted percentiles stay within the plan margin x target at
  the forecast load (the peak over a horizon covering startup). It is a jump up, not a step.
- Consolidate: the fewest replicas M (at most `max_step_down_share` of the pool fewer) for which the
  model predicts every target within the (smaller) consolidate margin at the load they would carry.
  That load is load x N/M, the forecast's hold rate included. It is never less than the highest recent burst
  measured (pool_load.burst_peak_rate). No forecaster sees a burst coming, and a scale-down made less than
  cooldown + startup before one cannot be undone in time. Consolidation happens only on a forecast chosen by
  backtest (a short history cannot promise the load stays down). A consolidation the pool had to undo is not
  made again at the load that undid it (undone.py).
A decode scale-up is sized so that its new replicas keep their ITL within the bound. (They run `cold_slowdown` x
slower while they warm up and fill to the others' batch at once.) The load is that forecast for
their warm-up minute, or the load measured now on a reactive step.
Hysteresis: a pool never moves against its last change within `cooldown_seconds` (zero flaps); the
joint GPU budget (budget.py) is applied last. Every decision carries its reason and the
predicted effect on the binding SLO.
"""

from __future__ import annotations

import math
from dataclasses import replace

from controlplane.observed.serving import ROLES, PoolRole
from controlplane.solve.pools.budget import split_budget
from controlplane.solve.pools.capacity import (
    FLOOR_REPLICAS,
    FLOOR_SLACK,
    LatencyModel,
    LoadForecast,
    cold_itl,
    predict,
    replicas_needed,
    worst,
)
from controlplane.solve.pools.decision import DecisionKind, PoolDecision, PredictedEffect
from controlplane.solve.pools.load import burst_peak_rate
from controlplane.solve.pools.local_prefill import step_threshold
from controlplane.solve.pools.planning import PoolDecisions
from controlplane.solve.pools.reactive import breaches, is_short, react
from controlplane.solve.pools.rules import PoolRules
from controlplane.solve.pools.undone import last_undone
from controlplane.solve.pools.view import PoolSize, PoolsView, SloTarget, role_targets


def is_predictive_tick(now: float, window_seconds: float, interval_seconds: float) -> bool:
    """True in the one window that crosses a multiple of the interval (a grid, so no state is needed)."""
    return math.floor(now / interval_seconds) != math.floor((now - window_seconds) / interval_seconds)


def _stale_or_missing(view: PoolsView, rules: PoolRules) -> str | None:
    latest = view.latest
    if latest is None:
        return "no window measured yet"
    age = view.now - latest.end
    if age > rules.max_window_age * latest.seconds:
        return f"latest window is {age:.0f}s old (stale)"
    if latest.num_arrivals is None:
        return "arrivals not measured"
    if latest.num_arrivals >= rules.min_window_requests and (latest.ttft is None or latest.itl is None):
        return "TTFT or ITL not measured while requests arrived"
    return None


def _effect(role: PoolRole, model: LatencyModel | None, load: LoadForecast | None, replicas: int,
            targets: tuple[SloTarget, ...]) -> PredictedEffect | None:
    if model is None or load is None or not targets:
        return None
    predicted = predict(role, model, load, replicas, targets)
    if predicted is None:
        return None
    target, _ = worst(predicted, targets)
    return PredictedEffect(target.name, predicted[target.name], target.seconds, replicas)


def _warming(load: LoadForecast | None, now_load: LoadForecast | None) -> LoadForecast | None:
    """The load new replicas meet while warming up: the forecast's for that time on a predictive step, else
    the load measured now (its backlog goes to whichever replicas hold it)."""
    if load is not None and load.warm_rate is not None:
        return load.warming()
    return now_load or load


def _warm_enough(model: LatencyModel | None, load: LoadForecast | None, target: int, pool: PoolSize,
                 targets: tuple[SloTarget, ...], rules: PoolRules, reason: str) -> tuple[int, str]:
    """A decode scale-up to `target`, grown until its new replicas, warming up, keep their ITL p99 within
    the strictest ITL bound (they fill to the others' batch at once and run slower)."""
    bound = max((t.seconds for t in targets if t.metric == "itl"), default=None)
    if model is None or load is None or bound is None or rules.cold_slowdown <= 1.0:
        return target, reason
    wanted = target
    while target < pool.max_replicas and (cold_itl(model, load, target, rules.cold_slowdown) or 0.0) > bound:
        target += 1
    if target == wanted:
        return target, reason
    return target, (f"{reason}; {target} so that replicas warming up ({rules.cold_slowdown:g}x slower) keep ITL "
                    f"within {bound:g}s")


def _decide(role: PoolRole, view: PoolsView, model: LatencyModel | None, now_load: LoadForecast | None,
            forecast: LoadForecast | None, is_tick: bool, rules: PoolRules) -> PoolDecision:
    pool, now = view.pools[role], view.now
    current = pool.num_serving
    targets = role_targets(role, view.targets)
    last = next((d for d in reversed(view.history) if d.role == role and d.direction != 0), None)
    since = now - last.at if last else math.inf

    def decision(target: int, kind: DecisionKind, reason: str, load: LoadForecast | None = None) -> PoolDecision:
        target = min(max(target, pool.min_replicas), pool.max_replicas)
        direction = (target > current) - (target < current)
        if direction and last and last.direction == -direction and since < rules.cooldown_seconds:
            return PoolDecision(now, role, current, current, DecisionKind.hold,
                                f"{reason}; held: scaled {'up' if last.direction > 0 else 'down'} {since:.0f}s ago "
                                f"(no reversal within {rules.cooldown_seconds:.0f}s)",
                                _effect(role, model, load or now_load, current, targets))
        if direction > 0 and role == "decode":
            target, reason = _warm_enough(model, _warming(load, now_load), target, pool, targets, rules, reason)
        sized_for = load or now_load
        return PoolDecision(now, role, current, target, kind, reason,
                            _effect(role, model, sized_for, target, targets),
                            None if sized_for is None else sized_for.request_rate)

    reported = len(view.latest.of_role(role))
    if reported < math.ceil(rules.min_fresh_share * pool.num_ready):
        return PoolDecision(now, role, current, current, DecisionKind.hold,
                            f"only {reported} of {pool.num_ready} ready replicas reported")
    if current < pool.min_replicas or current > pool.max_replicas:
        return decision(current, DecisionKind.predictive, f"bounds [{pool.min_replicas}, {pool.max_replicas}]")
    found = breaches(role, view, rules)
    need = None
    if is_tick and model is not None and forecast is not None:
        need = replicas_needed(role, model, forecast, targets, rules.margins(role)[0], pool.max_replicas)
    if need is not None and need[0] > current:
        return decision(need[0], DecisionKind.predictive, f"forecast {forecast.request_rate:.1f} req/s over "
                        f"{forecast.horizon_seconds:.0f}s ({forecast.method}) needs {need[0]}: {need[1]}", forecast)
    if found or is_short(role, view, model, now_load, rules):
        return react(role, view, model, now_load, found, rules, decision)
    if need is not None and need[0] < current:
        fewer = max(need[0], current - max(1, int(rules.max_step_down_share * current)), pool.min_replicas)
        if pool.num_starting:
            return decision(current, DecisionKind.keep, f"forecast needs {need[0]}, but replicas are still starting")
        if not forecast.is_backtested:
            return decision(current, DecisionKind.keep, f"forecast needs {need[0]}, but the forecaster has too little "
                            "history to be trusted with a scale-down", forecast)
        load = forecast.for_hold()
        if now_load is not None and now_load.request_rate > load.request_rate:
            load = load.scaled(now_load.request_rate / max(load.request_rate, 1e-9))
        goal = max(rules.margins(role)[1], FLOOR_SLACK * worst(predict(role, model, load, FLOOR_REPLICAS, targets),
                                                                 targets)[1])
        # a recent burst may come back before the step could be undone: the pool must still meet its targets
        # then (within the target itself, not the margin: the burst is a risk, the forecast the expectation)
        peak = burst_peak_rate(view.windows, rules.burst_memory_seconds, rules.burst_bucket_seconds, rules.burst_rise,
                               rules.burst_rise_seconds)
        burst = load.scaled(peak / max(load.request_rate, 1e-9)) if peak and peak > load.request_rate else None
        undone = last_undone(role, view.history, now, within_seconds=rules.undone_within_seconds,
                             memory_seconds=rules.undone_memory_seconds)
        if undone is not None and undone.is_repeated_at(load.request_rate, rules.undone_load_share):
            fewer = max(fewer, undone.replicas + 1)
            if fewer >= current:
                return decision(current, DecisionKind.keep, f"consolidation to {current - 1} refused: a scale-down "
                                f"to {undone.replicas} was undone {now - undone.at:.0f}s ago at "
                                f"{undone.request_rate:.1f} req/s, and the load is {load.request_rate:.1f}", load)
        # the fewest replicas, down to `fewer`, that carry load x current/M within the goal: a step the
        # model refuses at its largest may still be safe one replica smaller
        for replicas in range(fewer, current):
            target, ratio = worst(predict(role, model, load, replicas, targets), targets)
            if ratio > goal:
                continue
            if burst is not None:
                in_burst, burst_ratio = worst(predict(role, model, burst, replicas, targets), targets)
                if burst_ratio > max(1.0, goal):
                    continue
            return decision(replicas, DecisionKind.consolidate,
                            f"load x {current}/{replicas} keeps {target.name} at {ratio:.2f} of target", load)
        why = f"{target.name} would be at {ratio:.2f} of target (> {goal:.2f})" if ratio > goal else \
            f"{in_burst.name} would be at {burst_ratio:.2f} of target at the {peak:.1f} req/s burst of the last " \
            f"{rules.burst_memory_seconds:.0f}s"
        return decision(current, DecisionKind.keep, f"consolidation to {current - 1} refused: {why}", load)
    if model is None:
        return decision(current, DecisionKind.keep, "within targets; no latency model yet (reactive steps only)")
    return decision(current, DecisionKind.keep, "within targets", forecast)


def plan_pools(view: PoolsView, model: LatencyModel | None, now_load: LoadForecast | None,
               forecast: LoadForecast | None, rules: PoolRules = PoolRules()) -> PoolDecisions:
    """model: per-replica latency (None before enough data); now_load: the measured load; forecast:
    the load to plan for, given on predictive ticks (None otherwise)."""
    if model is not None:
        model = model.with_prefill_limits(rules.max_prefill_utilisation, rules.ttft_tail_percentile)
    if not rules.size_prefill_by_mix:  # sized from the mean prompt, under the utilisation ceiling
        now_load, forecast = (None if load is None else replace(load, remote_mix=None) for load in (now_load, forecast))
    problem = _stale_or_missing(view, rules)
    if problem is not None:
        return PoolDecisions(view.now, tuple(
            PoolDecision(view.now, role, view.pools[role].num_serving, view.pools[role].num_serving,
                         DecisionKind.hold, f"hold: {problem}") for role in ROLES))
    is_tick = is_predictive_tick(view.now, view.latest.seconds, rules.predictive_interval_seconds)
    decisions = {role: _decide(role, view, model, now_load, forecast, is_tick, rules) for role in ROLES}
    load = forecast or now_load

    def ratio(role: PoolRole, replicas: int) -> float | None:
        targets = role_targets(role, view.targets)
        if model is None or load is None or not targets:
            return None
        predicted = predict(role, model, load, replicas, targets)
        return None if predicted is None else worst(predicted, targets)[1]

    wants = {role: d.target for role, d in decisions.items()}
    got = split_budget(wants, view.pools, view.gpu_budget, ratio)
    for role, d in decisions.items():
        if got[role] != d.target:
            decisions[role] = PoolDecision(view.now, role, d.current, got[role], DecisionKind.budget,
                                           f"{d.reason}; GPU budget {view.gpu_budget} allows {got[role]}",
                                           _effect(role, model, load, got[role], role_targets(role, view.targets)),
                                           d.request_rate)
    threshold = None
    if is_tick:
        threshold = step_threshold(view.now, view.local_prefill_threshold, view.windows, view.targets,
                                   view.threshold_history, rules.threshold)
    return PoolDecisions(view.now, tuple(decisions[role] for role in ROLES), threshold, load)
