"""The PD-aware local-prefill threshold, tuned by a bounded step rule from measured TTFT and ITL.

Prompts up to the threshold prefill on the decode instance (no prefill queue, no KV hand-off), at the
price of a longer decode step for every sequence batched with them, on replicas that cost more GPUs.
So the threshold moves up one step only while the prefill pool's TTFT is close to its target and decode has
ample ITL headroom (capacity that would idle otherwise). It moves down one step when decode's ITL nears its
target, or the local path has become the slower one. It never leaves [min_tokens, max_tokens], and never moves
back within the cooldown of the last move. Measurements are
medians over the last `num_windows` windows, so one noisy window cannot move it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from controlplane.observed.serving import PoolWindow
from controlplane.solve.pools.decision import ThresholdDecision
from controlplane.solve.pools.view import SloTarget


@dataclass(frozen=True)
class ThresholdRules:
    step_tokens: int = 128
    min_tokens: int = 0
    max_tokens: int = 2048
    num_windows: int = 6
    itl_headroom: float = 0.5  # raise only while every ITL percentile is within this share of its target
    itl_ceiling: float = 0.8  # lower once any ITL percentile passes this share of its target
    ttft_pressure: float = 0.85  # raise only while remote TTFT is past this share of its target
    cooldown_seconds: float = 300.0


def _median(values: list[float | None]) -> float | None:
    finite = [v for v in values if v is not None]
    return float(np.median(finite)) if finite else None


def _ratio(windows: tuple[PoolWindow, ...], targets: tuple[SloTarget, ...], field: str) -> float | None:
    """Worst over targets of (median measured percentile / target) for `field` (itl, ttft_remote)."""
    ratios = []
    for target in targets:
        measured = _median([target.of(getattr(w, field)) for w in windows])
        if measured is not None:
            ratios.append(measured / target.seconds)
    return max(ratios) if ratios else None


def step_threshold(now: float, current: int, windows: tuple[PoolWindow, ...], targets: tuple[SloTarget, ...],
                   history: tuple[ThresholdDecision, ...], rules: ThresholdRules = ThresholdRules()
                   ) -> ThresholdDecision:
    recent = windows[-rules.num_windows:]
    itl_targets = tuple(t for t in targets if t.metric == "itl")
    ttft_targets = tuple(t for t in targets if t.metric == "ttft")
    itl = _ratio(recent, itl_targets, "itl")
    remote = _ratio(recent, ttft_targets, "ttft_remote")
    local_p90 = _median([w.ttft_local.p90 if w.ttft_local else None for w in recent])
    remote_p90 = _median([w.ttft_remote.p90 if w.ttft_remote else None for w in recent])
    measured = {"itl_over_target": itl, "ttft_remote_over_target": remote,
                "ttft_local_p90": local_p90, "ttft_remote_p90": remote_p90}

    def decide(direction: int, reason: str) -> ThresholdDecision:
        target = int(np.clip(current + direction * rules.step_tokens, rules.min_tokens, rules.max_tokens))
        last = history[-1] if history else None
        if target != current and last is not None and last.direction == -direction \
                and now - last.at < rules.cooldown_seconds:
            return ThresholdDecision(now, current, current, f"hold: {reason}, but moved the other way "
                                     f"{now - last.at:.0f}s ago (cooldown {rules.cooldown_seconds:.0f}s)", measured)
        return ThresholdDecision(now, current, target, reason, measured)

    if itl is None or remote is None:
        return ThresholdDecision(now, current, current, "hold: ITL or remote TTFT not measured", measured)
    if itl > rules.itl_ceiling:
        return decide(-1, f"decode ITL at {itl:.2f} of its target: short prompts back to the prefill pool")
    if local_p90 is not None and remote_p90 is not None and local_p90 > remote_p90:
        return decide(-1, f"local prefill slower (TTFT p90 {local_p90:.3f}s vs remote {remote_p90:.3f}s)")
    if remote > rules.ttft_pressure and itl < rules.itl_headroom:
        return decide(+1, f"remote TTFT at {remote:.2f} of its target, decode ITL at {itl:.2f}: "
                          "more short prompts prefill on decode")
    return ThresholdDecision(now, current, current, "keep: neither pool under pressure", measured)
