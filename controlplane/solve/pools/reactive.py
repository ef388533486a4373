"""The pool planner's reactive step, every window: which pool a measured breach is to blame on, and
how far one goes up when a breach is measured or the load measured now outgrows the pool.

A breach counts when the latest window is over target and either far over (`severe_breach` x) or over
in another of the last `breach_windows` windows too: one window a few percent over is noise, not a
capacity shortage. The step is one replica, or as many as the model says the load now needs (the backlog
there will be when new replicas serve, to be served within `drain_seconds` after that). It is at most
`max_reactive_share` of the pool more. There is none while replicas already starting cover it, and none when one
more replica is predicted to hardly change the breached percentile (long prompts' own prefill time, not
a queue). An ITL breach that only decode replicas still warming up measure is not one (is_warming_up).
Without a breach, the load now moves a pool only when it needs more replicas at the rate its counts surely
exceed (solve/pools/load.py: sure_rate).
"""

from __future__ import annotations

import math

from controlplane.observed.serving import PoolRole, PoolWindow
from controlplane.solve.pools.capacity import LatencyModel, LoadForecast, predict, replicas_needed
from controlplane.solve.pools.decision import DecisionKind, PoolDecision
from controlplane.solve.pools.rules import PoolRules
from controlplane.solve.pools.view import PoolsView, SloTarget, role_targets


def breaches(role: PoolRole, view: PoolsView, rules: PoolRules) -> list[tuple[SloTarget, float]]:
    """(target, measured seconds) of the breaches this pool is to blame for, in the latest windows."""
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
            if value is not None and not is_warming_up(latest, target, rules.cold_start_windows):
                out.append((target, value))
    return out


def is_warming_up(window: PoolWindow, target: SloTarget, cold_start_windows: int) -> bool:
    """The decode pool's ITL breach is its warming replicas' alone: some replica is in its first
    `cold_start_windows` windows (slower steps) and every warm one measured `target` within bound. Such a breach
    ends when they are warm, before any replica asked for now could serve; adding one only costs GPUs."""
    decode = window.of_role("decode")
    warm = [target.of(r.itl) for r in decode if r.age_windows >= cold_start_windows]
    measured = [value for value in warm if value is not None]
    return len(warm) < len(decode) and bool(measured) and max(measured) <= target.seconds


def _gain(role: PoolRole, model: LatencyModel | None, load: LoadForecast | None, current: int,
          target: SloTarget) -> float | None:
    """Predicted relative drop of `target`'s percentile from one more replica (None: no model)."""
    if model is None or load is None:
        return None
    now, more = predict(role, model, load, current, (target,)), predict(role, model, load, current + 1, (target,))
    if now is None or more is None or target.name not in now or not math.isfinite(now[target.name]):
        return None
    return 1.0 - more[target.name] / now[target.name] if now[target.name] > 0 else 0.0


def _backlog(window: PoolWindow, prompt_tokens: float) -> float:
    """Requests queued at the window's end: prompts waiting for prefill, requests waiting for KV room."""
    queued = sum(r.queued_tokens for r in window.of_role("prefill"))
    waiting = sum(r.num_waiting for r in window.of_role("decode"))
    return waiting + (queued / prompt_tokens if prompt_tokens > 0 else 0.0)


def _with_backlog(load: LoadForecast, view: PoolsView, role: PoolRole, rules: PoolRules) -> LoadForecast:
    """The measured load plus the backlog there will be when the pool's next replicas serve.

    The backlog is the queue measured now, still growing at the rate it grew over the latest window until then
    (the replicas already starting, else `startup_seconds` from now). It is to be served within `drain_seconds`
    after that, on top of new arrivals. Sized on the queue alone, a jump is short by what arrives while its replicas
    start, and the pool creeps up one late step at a time."""
    windows = view.windows
    now = _backlog(windows[-1], load.remote_prompt_tokens)
    before = _backlog(windows[-2], load.remote_prompt_tokens) if len(windows) > 1 else now
    growth = max(0.0, now - before) / windows[-1].seconds
    until = rules.startup_seconds
    if view.pools[role].num_starting:
        up = next((d for d in reversed(view.history) if d.role == role and d.direction > 0), None)
        until = 0.0 if up is None else max(0.0, up.at + rules.startup_seconds - view.now)
    backlog = now + growth * until
    return load.scaled(1.0 + backlog / rules.drain_seconds / max(load.request_rate, 1e-9))


def is_short(role: PoolRole, view: PoolsView, model: LatencyModel | None, now_load: LoadForecast | None,
              rules: PoolRules) -> bool:
    """The model says the load measured now, backlog included, needs more replicas than ready + starting."""
    if model is None or now_load is None:
        return False
    pool = view.pools[role]
    if now_load.request_rate > 0:
        # a rate counted from a few hundred arrivals is off by a few percent: act on what it surely is
        now_load = now_load.scaled(now_load.surely / now_load.request_rate)
    load = _with_backlog(now_load, view, role, rules)
    need = replicas_needed(role, model, load, role_targets(role, view.targets), rules.margins(role)[0],
                           pool.max_replicas)
    return need is not None and need[0] > pool.num_serving


def react(role: PoolRole, view: PoolsView, model: LatencyModel | None, now_load: LoadForecast | None,
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
    load = None if now_load is None else _with_backlog(now_load, view, role, rules)
    if model is not None and load is not None:
        need = replicas_needed(role, model, load, role_targets(role, view.targets), rules.margins(role)[0],
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
