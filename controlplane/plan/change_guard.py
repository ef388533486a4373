"""Guards on a placement change: what it must not cost the serving, measured before and after it. Pure.

A placement change aims at the imbalance; it can hurt what it does not aim at. SGLang users saw MTP acceptance
fall after a rebalance, and a change that lands badly shows in the requests' latency. So the windows the change was
planned on (before) and the windows measured under it (after) are compared on MTP acceptance (accepted over draft
tokens) and, where the engine reports them, the mean TTFT and ITL. A drop beyond the policy's tolerance (a share of
the value before: `mtp_guard_tolerance` for acceptance, `latency_guard_tolerance` for the latencies) rolls the
change back with that reason, as an imbalance regression does, and parks the knob (controlplane/loop/verify.py).
The absolute floor (`mtp_acceptance_floor`) still holds on its own.

Each side needs enough of a sample to say anything of the change: `MIN_LATENCY_SAMPLES` latencies, and
`MIN_DRAFT_TOKENS` draft tokens, where acceptance must also have fallen by `MIN_SIGMAS` standard errors of the
difference (a binomial share: a few windows of a small pool swing by several points by chance).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from controlplane.observed.window import Window

MIN_LATENCY_SAMPLES = 200  # requests (TTFT) or tokens (ITL) on each side before a latency is compared
MIN_DRAFT_TOKENS = 1000  # draft tokens on each side before acceptance is compared
MIN_SIGMAS = 3.0  # acceptance's fall must be this many standard errors of the difference, besides the tolerance


@dataclass(frozen=True)
class GuardVerdict:
    """is_breached: a guarded signal dropped beyond its tolerance; measured: each compared signal, before and
    after; reason: the first breach, else what was compared."""

    is_breached: bool
    reason: str
    measured: dict


def _ratio(windows: Sequence[Window], numerator: str, denominator: str, min_denominator: float) -> float | None:
    den = sum(w.counters.get(denominator, 0.0) for w in windows)
    return sum(w.counters.get(numerator, 0.0) for w in windows) / den if den >= min_denominator else None


def guard_change(before: Sequence[Window], after: Sequence[Window], *, mtp_tolerance: float,
                 latency_tolerance: float) -> GuardVerdict:
    """Compares the guarded signals over `before` and `after` (windows, any order)."""
    signals = {  # name -> (numerator, denominator, minimum denominator, +1 higher is better / -1 lower is)
        "mtp_acceptance": ("spec_accepted_tokens", "spec_draft_tokens", MIN_DRAFT_TOKENS, +1, mtp_tolerance),
        "ttft_mean_seconds": ("ttft_sum", "ttft_count", MIN_LATENCY_SAMPLES, -1, latency_tolerance),
        "itl_mean_seconds": ("itl_sum", "itl_count", MIN_LATENCY_SAMPLES, -1, latency_tolerance),
    }
    measured, breaches = {}, []
    for name, (numerator, denominator, minimum, better, tolerance) in signals.items():
        was, now = (_ratio(ws, numerator, denominator, minimum) for ws in (before, after))
        if was is None or now is None or was <= 0:
            continue
        measured[name] = {"before": round(was, 4), "after": round(now, 4)}
        worse = (was - now) / was if better > 0 else (now - was) / was  # the share it got worse by
        if name == "mtp_acceptance":
            n_before, n_after = (sum(w.counters.get(denominator, 0.0) for w in ws) for ws in (before, after))
            pooled = (was * n_before + now * n_after) / (n_before + n_after)
            error = math.sqrt(max(pooled * (1 - pooled), 0.0) * (1 / n_before + 1 / n_after))
            if was - now <= MIN_SIGMAS * error:
                continue  # within what chance moves it
        if worse > tolerance:
            what = "fell" if better > 0 else "rose"
            breaches.append(f"{name.replace('_', ' ')} {what} from {was:.3f} to {now:.3f} under the change "
                            f"({worse:.0%} > the policy's tolerance {tolerance:.0%})")
    if breaches:
        return GuardVerdict(True, "; ".join(breaches), measured)
    return GuardVerdict(False, f"guards held ({', '.join(measured) or 'nothing measured on both sides'})", measured)
