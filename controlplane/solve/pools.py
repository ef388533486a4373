"""Replicas per pool (prefill, decode) against TTFT and ITL targets. Pure: view, model and loads in, plan out.

Every window:
- hold both pools when the latest window is stale or a needed measurement is missing (never read
  as zero load), and hold a pool that fewer than a quorum of its ready replicas reported for;
- reactive: a measured percentile over its target adds one replica to the pool that caused it
  (TTFT: the prefill pool when its replicas' own TTFT is over target or decode is not short of KV
  room, the decode pool when requests wait for KV room; ITL and local-prefill TTFT: the decode pool),
  unless a scale-up is already starting or the model predicts one more replica would hardly change
  it (long prompts' own prefill, not a queue); and when the model says the load measured now,
  backlog included, needs more replicas than the pool has (no need to wait for the breach), it goes
  there at once, at most `max_reactive_share` of the pool more per window.
Every `predictive_interval_seconds`, on the clock's grid:
- predictive: the fewest replicas whose predicted percentiles stay within the plan margin x target at
  the forecast load (the peak over a horizon covering startup) — a jump up, not a step;
- consolidate: fewer replicas (at most `max_step_down_share` of them) only if the model predicts every target
  within the (smaller) consolidate margin at the load they would carry (load x N/M, the forecast peak included),
  and only on a forecast chosen by backtest (a short history cannot promise the load stays down).
Hysteresis: a pool never moves against its last change within `cooldown_seconds` (zero flaps); the
joint GPU budget (pool_budget.py) is applied last. Every decision carries its reason and the
predicted effect on the binding SLO.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from controlplane.solve.local_prefill import ThresholdRules, step_threshold
from controlplane.solve.pool_budget import split_budget
from controlplane.solve.pool_capacity import (
    FLOOR_REPLICAS,
    FLOOR_SLACK,
    LatencyModel,
    LoadForecast,
    predict,
    replicas_needed,
    worst,
)
from controlplane.solve.pool_decision import DecisionKind, PoolDecision, PoolPlan, PredictedEffect
from controlplane.solve.pool_view import ROLES, PoolRole, PoolsView, PoolWindow, SloTarget


@dataclass(frozen=True)
class PoolRules:
    predictive_interval_seconds: float = 180.0
    cooldown_seconds: float = 300.0
    max_window_age: float = 2.5  # windows: an older latest window is stale
    min_window_requests: int = 20  # fewer requests in a window: its percentiles show no breach
    breach_windows: int = 3
    severe_breach: float = 1.5
    min_fresh_share: float = 0.5  # of a pool's ready replicas that must have reported
    # sizing and scale-down margins (predicted / target), per pool: TTFT is a queue and rises steeply
    # near saturation, ITL grows gently with the batch, so decode may run closer to its target
    plan_margin: float = 0.8
    consolidate_margin: float = 0.75
    decode_plan_margin: float = 0.9
    decode_consolidate_margin: float = 0.85

    def margins(self, role: PoolRole) -> tuple[float, float]:
        """(plan, consolidate) margins of the pool."""
        if role == "decode":
            return self.decode_plan_margin, self.decode_consolidate_margin
        return self.plan_margin, self.consolidate_margin
    max_step_down_share: float = 0.34  # of the pool, at least one replica
    max_reactive_share: float = 0.5  # of the pool, at least one replica
    min_reactive_gain: float = 0.1  # a breach one more replica is predicted to cut by less is not acted on
    drain_seconds: float = 180.0  # a measured backlog is planned to be gone within this (startup included)
    threshold: ThresholdRules = ThresholdRules()


def is_predictive_tick(now: float, window_seconds: float, interval_seconds: float) -> bool:
    """True in the one window that crosses a multiple of the interval (a grid, so no state is needed)."""
    return math.floor(now / interval_seconds) != math.floor((now - window_seconds) / interval_seconds)


def _role_targets(role: PoolRole, targets: tuple[SloTarget, ...]) -> tuple[SloTarget, ...]:
    return tuple(t for t in targets if t.metric == ("ttft" if role == "prefill" else "itl"))


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


def _breaches(role: PoolRole, view: PoolsView, rules: PoolRules) -> list[tuple[SloTarget, float]]:
    """(target, measured seconds) this pool is to blame for. A breach counts when the latest window is
    over target and either far over (`severe_breach` x) or over in another of the last
    `breach_windows` windows too: one window a few percent over is noise, not a capacity shortage."""
    recent = view.windows[-rules.breach_windows:]

    def sustained(field: str, target: SloTarget) -> float | None:
        values = []
        for w in recent:
            summary = getattr(w, field)
            values.append(None if summary is None or summary.count < rules.min_window_requests
                          else target.of(summary))
        latest = values[-1]
        if latest is None or latest <= target.seconds:
            return None
        others = [v for v in values[:-1] if v is not None and v > target.seconds]
        return latest if latest > rules.severe_breach * target.seconds or others else None

    latest, out = view.latest, []
    for target in view.targets_of("ttft"):
        remote = sustained("ttft_remote", target)
        if remote is not None:
            # one pool to blame: prefill when its own replicas are slow, else decode when requests wait
            # there for KV room, else prefill
            own = [v for v in (target.of(r.ttft) for r in latest.of_role("prefill")) if v is not None]
            is_prefill_slow = not own or max(own) > target.seconds
            is_decode_full = any(r.num_waiting > 0 for r in latest.of_role("decode"))
            blamed = "decode" if is_decode_full and not is_prefill_slow else "prefill"
            if role == blamed:
                out.append((target, remote))
        local = sustained("ttft_local", target)
        if role == "decode" and local is not None:
            out.append((target, local))
    if role == "decode":
        for target in view.targets_of("itl"):
            value = sustained("itl", target)
            if value is not None:
                out.append((target, value))
    return out


def _effect(role: PoolRole, model: LatencyModel | None, load: LoadForecast | None, replicas: int,
            targets: tuple[SloTarget, ...]) -> PredictedEffect | None:
    if model is None or load is None or not targets:
        return None
    predicted = predict(role, model, load, replicas, targets)
    if predicted is None:
        return None
    target, _ = worst(predicted, targets)
    return PredictedEffect(target.name, predicted[target.name], target.seconds, replicas)


def _gain(role: PoolRole, model: LatencyModel | None, load: LoadForecast | None, current: int,
          target: SloTarget) -> float | None:
    """Predicted relative drop of `target`'s percentile from one more replica (None: no model)."""
    if model is None or load is None:
        return None
    now, more = predict(role, model, load, current, (target,)), predict(role, model, load, current + 1, (target,))
    if now is None or more is None or target.name not in now or not math.isfinite(now[target.name]):
        return None
    return 1.0 - more[target.name] / now[target.name] if now[target.name] > 0 else 0.0


def _with_backlog(load: LoadForecast, window: PoolWindow, drain_seconds: float) -> LoadForecast:
    """The measured load plus what is queued (prompts waiting for prefill, requests waiting for KV
    room), to be served within `drain_seconds` on top of new arrivals."""
    queued = sum(r.queued_tokens for r in window.of_role("prefill"))
    waiting = sum(r.num_waiting for r in window.of_role("decode"))
    backlog = waiting + (queued / load.remote_prompt_tokens if load.remote_prompt_tokens > 0 else 0.0)
    return load.scaled(1.0 + backlog / drain_seconds / max(load.request_rate, 1e-9))


def _is_short(role: PoolRole, view: PoolsView, model: LatencyModel | None, now_load: LoadForecast | None,
              rules: PoolRules) -> bool:
    """The model says the load measured now, backlog included, needs more replicas than ready + starting."""
    if model is None or now_load is None:
        return False
    pool = view.pools[role]
    load = _with_backlog(now_load, view.latest, rules.drain_seconds)
    need = replicas_needed(role, model, load, _role_targets(role, view.targets), rules.margins(role)[0],
                           pool.max_replicas)
    return need is not None and need[0] > pool.num_serving


def _react(role: PoolRole, view: PoolsView, model: LatencyModel | None, now_load: LoadForecast | None,
           breaches: list[tuple[SloTarget, float]], rules: PoolRules, decision) -> PoolDecision:
    """A measured breach: one replica more, or as many as the model says the load now (backlog
    included) needs, at most `max_reactive_share` of the pool more, counting replicas already starting."""
    pool = view.pools[role]
    current = pool.num_serving
    if breaches:
        target, value = breaches[0]
        summary = f"measured {target.name} {value:.3f}s > {target.seconds:.3f}s"
        step = current if pool.num_starting else current + 1
    else:
        target, summary, step = None, "within targets", current
    load = None if now_load is None else _with_backlog(now_load, view.latest, rules.drain_seconds)
    if model is not None and load is not None:
        need = replicas_needed(role, model, load, _role_targets(role, view.targets), rules.margins(role)[0],
                               pool.max_replicas)
        if need is not None and need[0] > step:
            step = min(need[0], current + max(1, math.ceil(rules.max_reactive_share * current)))
            summary += f"; load now {load.request_rate:.1f} req/s (backlog included) needs {need[0]}"
    if step == current:
        return decision(current, DecisionKind.hold, f"{summary}; {pool.num_starting} replica(s) already starting",
                        load)
    gain = None if target is None else _gain(role, model, load, current, target)
    if step == current + 1 and gain is not None and gain < rules.min_reactive_gain:
        return decision(current, DecisionKind.keep, f"{summary}, but one more replica is predicted to cut "
                        f"it by {100 * gain:.0f}% only: not a capacity problem", load)
    return decision(step, DecisionKind.reactive, summary, load)


def _decide(role: PoolRole, view: PoolsView, model: LatencyModel | None, now_load: LoadForecast | None,
            forecast: LoadForecast | None, is_tick: bool, rules: PoolRules) -> PoolDecision:
    pool, now = view.pools[role], view.now
    current = pool.num_serving
    targets = _role_targets(role, view.targets)
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
        return PoolDecision(now, role, current, target, kind, reason,
                            _effect(role, model, load or now_load, target, targets))

    reported = len(view.latest.of_role(role))
    if reported < math.ceil(rules.min_fresh_share * pool.num_ready):
        return PoolDecision(now, role, current, current, DecisionKind.hold,
                            f"only {reported} of {pool.num_ready} ready replicas reported")
    if current < pool.min_replicas or current > pool.max_replicas:
        return decision(current, DecisionKind.predictive, f"bounds [{pool.min_replicas}, {pool.max_replicas}]")
    breaches = _breaches(role, view, rules)
    need = None
    if is_tick and model is not None and forecast is not None:
        need = replicas_needed(role, model, forecast, targets, rules.margins(role)[0], pool.max_replicas)
    if need is not None and need[0] > current:
        return decision(need[0], DecisionKind.predictive, f"forecast {forecast.request_rate:.1f} req/s over "
                        f"{forecast.horizon_seconds:.0f}s ({forecast.method}) needs {need[0]}: {need[1]}", forecast)
    if breaches or _is_short(role, view, model, now_load, rules):
        return _react(role, view, model, now_load, breaches, rules, decision)
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
        predicted = predict(role, model, load, fewer, targets)
        target, ratio = worst(predicted, targets)
        goal = max(rules.margins(role)[1], FLOOR_SLACK * worst(predict(role, model, load, FLOOR_REPLICAS, targets),
                                                                 targets)[1])
        if ratio <= goal:
            return decision(fewer, DecisionKind.consolidate,
                            f"load x {current}/{fewer} keeps {target.name} at {ratio:.2f} of target", load)
        return decision(current, DecisionKind.keep, f"consolidation to {fewer} refused: {target.name} "
                        f"would be at {ratio:.2f} of target (> {goal:.2f})", load)
    if model is None:
        return decision(current, DecisionKind.keep, "within targets; no latency model yet (reactive steps only)")
    return decision(current, DecisionKind.keep, "within targets", forecast)


def plan_pools(view: PoolsView, model: LatencyModel | None, now_load: LoadForecast | None,
               forecast: LoadForecast | None, rules: PoolRules = PoolRules()) -> PoolPlan:
    """model: per-replica latency (None before enough data); now_load: the measured load; forecast:
    the load to plan for, given on predictive ticks (None otherwise)."""
    problem = _stale_or_missing(view, rules)
    if problem is not None:
        return PoolPlan(view.now, tuple(
            PoolDecision(view.now, role, view.pools[role].num_serving, view.pools[role].num_serving,
                         DecisionKind.hold, f"hold: {problem}") for role in ROLES))
    is_tick = is_predictive_tick(view.now, view.latest.seconds, rules.predictive_interval_seconds)
    decisions = {role: _decide(role, view, model, now_load, forecast, is_tick, rules) for role in ROLES}
    load = forecast or now_load

    def ratio(role: PoolRole, replicas: int) -> float | None:
        targets = _role_targets(role, view.targets)
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
                                           _effect(role, model, load, got[role], _role_targets(role, view.targets)))
    threshold = None
    if is_tick:
        threshold = step_threshold(view.now, view.local_prefill_threshold, view.windows, view.targets,
                                   view.threshold_history, rules.threshold)
    return PoolPlan(view.now, tuple(decisions[role] for role in ROLES), threshold)
