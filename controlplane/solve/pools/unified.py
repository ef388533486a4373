"""The pool planner of a unified pool (each replica prefills and decodes: a vLLM server), pure: sized from the
engine's own signals its replicas report (controlplane/observed/serving.py ReplicaWindow: requests waiting at each
window's end, the engine's TTFT histogram) against the policy's TTFT target.

One replica more when the pool is pressed in each of the last `breach_windows` windows (a replica's TTFT percentile
over its target, or requests waiting for room in its batch), none while a replica it asked for is still starting.
One replica fewer, none starting, when it has been calm for the cooldown (no request waiting, every replica's TTFT under
`calm_share` of its target) and the request rate now is at most `down_share` of the rate that made it grow (the
last step up's): the replicas that stay then carry at most that share of what pressed them. No change within the
cooldown of the last one. (The KV-cache usage vLLM exports is not read here: its capacity rides only in a label,
agents/adapters/vllm/names.py, so the window carries no KV tokens for it.)
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from controlplane.observed.serving import PoolWindow
from controlplane.solve.pools.decision import DecisionKind, PoolDecision, PredictedEffect
from controlplane.solve.pools.planning import PoolDecisions
from controlplane.solve.pools.view import PoolsView, SloTarget

ROLE = "unified"


@dataclass(frozen=True)
class UnifiedRules:
    cooldown_seconds: float = 60.0
    breach_windows: int = 2
    calm_share: float = 0.5  # of the TTFT target: calm under it
    down_share: float = 0.5  # of the rate the last step up was sized at
    max_window_age: float = 2.5  # windows: an older latest window is stale


def _worst_ttft(window: PoolWindow, target: SloTarget) -> float | None:
    """The slowest replica's TTFT percentile in `window` (seconds; None: no replica measured one)."""
    values = [v for v in (target.of(r.ttft) for r in window.of_role(ROLE)) if v is not None]
    return max(values) if values else None


def _is_pressed(window: PoolWindow, target: SloTarget) -> bool:
    ttft = _worst_ttft(window, target)
    return (ttft is not None and ttft > target.seconds) or any(r.num_waiting > 0 for r in window.of_role(ROLE))


def _is_calm(window: PoolWindow, target: SloTarget, calm_share: float) -> bool:
    ttft = _worst_ttft(window, target)
    return (ttft is None or ttft <= calm_share * target.seconds) and not any(r.num_waiting for r in
                                                                             window.of_role(ROLE))


def _rate(windows: tuple[PoolWindow, ...]) -> float | None:
    """requests/s the routers counted over `windows` (None: no router reported them)."""
    known = [w for w in windows if w.num_arrivals is not None]
    seconds = sum(w.seconds for w in known)
    return sum(w.num_arrivals for w in known) / seconds if seconds else None


def plan_unified(view: PoolsView, rules: UnifiedRules = UnifiedRules()) -> PoolDecisions:
    """The unified pool's decision at `view.now`: up one, down one, hold or keep."""
    size = view.pools[ROLE]
    current = size.num_serving

    def decide(kind: DecisionKind, target: int, reason: str, rate: float | None = None,
               predicted: PredictedEffect | None = None) -> PoolDecisions:
        return PoolDecisions(view.now, (PoolDecision(view.now, ROLE, current, target, kind, reason, predicted, rate),))

    ttft = next(iter(view.targets_of("ttft")), None)
    latest = view.latest
    if ttft is None:
        return decide(DecisionKind.keep, current, "the policy's SLO sets no TTFT target")
    if latest is None or view.now - latest.end > rules.max_window_age * latest.seconds:
        return decide(DecisionKind.hold, current, "no recent window")
    if current < size.min_replicas:
        return decide(DecisionKind.reactive, size.min_replicas, f"under the policy's minimum {size.min_replicas}")
    last = view.history[-1] if view.history else None
    since_last = math.inf if last is None else view.now - last.at
    if since_last < rules.cooldown_seconds:
        return decide(DecisionKind.hold, current, f"the last change was {since_last:.0f}s ago (cooldown "
                                                  f"{rules.cooldown_seconds:g}s)")
    recent = view.windows[-rules.breach_windows:]
    worst = _worst_ttft(latest, ttft)
    measured = "no TTFT measured" if worst is None else f"{ttft.name} {worst:.2f}s (target {ttft.seconds:g}s)"
    waiting = sum(r.num_waiting for r in latest.of_role(ROLE))
    rate = _rate(recent)
    if len(recent) == rules.breach_windows and all(_is_pressed(w, ttft) for w in recent):
        if size.num_starting:
            return decide(DecisionKind.hold, current, f"pressed ({measured}, {waiting} waiting); "
                                                      f"{size.num_starting} replica(s) starting")
        if current >= size.max_replicas:
            return decide(DecisionKind.keep, current, f"pressed ({measured}, {waiting} waiting) at the policy's "
                                                      f"maximum {size.max_replicas}")
        return decide(DecisionKind.reactive, current + 1, f"pressed {rules.breach_windows} windows running: "
                      f"{measured}, {waiting} waiting", rate,
                      PredictedEffect(ttft.name, ttft.seconds, ttft.seconds, current + 1))
    if size.num_starting:  # what it grew for has not served yet: a step down now would judge a pool that never ran
        return decide(DecisionKind.hold, current, f"{measured}; {size.num_starting} replica(s) starting")
    calm_windows = max(1, math.ceil(rules.cooldown_seconds / latest.seconds))
    calm = view.windows[-calm_windows:]
    if current > size.min_replicas and len(calm) == calm_windows and \
            all(_is_calm(w, ttft, rules.calm_share) for w in calm):
        grown_at = next((d.request_rate for d in reversed(view.history) if d.role == ROLE and d.target > d.current
                         and d.request_rate), None) if view.history else None
        rate_now = _rate(calm)
        if rate_now is not None and (grown_at is None or rate_now <= rules.down_share * grown_at):
            return decide(DecisionKind.consolidate, current - 1, f"calm for {rules.cooldown_seconds:g}s ({measured}, "
                          f"none waiting) at {rate_now:.2f} req/s"
                          + ("" if grown_at is None else f", at most {rules.down_share:g}x the {grown_at:.2f} "
                                                          "req/s it grew at"), rate_now,
                          PredictedEffect(ttft.name, ttft.seconds, ttft.seconds, current - 1))
    return decide(DecisionKind.keep, current, f"{measured}, {waiting} waiting, {current} replica(s)")
