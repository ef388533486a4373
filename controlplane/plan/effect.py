"""The intended effect of a change and the verdict on it once measured. Pure.

Every change the loop makes names what it aims at: one signal, the direction it should move, the value
before and the value predicted, and the floors the change must not break. `verify` measures the signals
over `verify_windows` windows under the change and asks `judge`: "verified" means the effect happened.
A change that did not move its signal as intended, or that broke a floor, is reverted and its knob parked
(controlplane/plan/parking.py), so the loop learns that this knob does not work here instead of retrying it.

Signals (the names `observed.signals_of` measures): `imbalance` (max/mean GPU load), `all2all_share`
(all-to-all seconds / forward seconds), `routing_recall` (share of the experts the model's own routing picks
that the limited router keeps, controlplane/solve/routing.py), `mtp_acceptance` (accepted / draft tokens).
"""

from __future__ import annotations

from dataclasses import dataclass

from controlplane.desired import Effect, Policy
from controlplane.observed.pool import PoolState

# a change counts as effective when the signal moved the intended way by at least this share of the
# predicted move (give or take the effect's tolerance): predictions are upper bounds, measurements are noisy
MIN_SHARE_OF_PREDICTED = 0.5


@dataclass(frozen=True)
class Verdict:
    is_intended: bool
    reason: str  # what happened, in words, with the numbers
    measured: dict  # signal -> measured value (rounded), for the action's record


def judge(effect: Effect, measured: dict[str, float | None]) -> Verdict:
    """measured: signal -> its mean over the windows under the change (None: not measured there).
    A floor whose signal was not measured is not judged: missing data is never read as broken."""
    after = measured.get(effect.signal)
    record = {k: round(v, 4) for k, v in measured.items() if v is not None}
    if after is None:
        return Verdict(False, f"{effect.signal} was not measured under the change", record)
    moved = effect.direction * (after - effect.before)
    needed = MIN_SHARE_OF_PREDICTED * effect.predicted_move - effect.tolerance
    broken = [f"{name} {measured[name]:.3f} < floor {floor}" for name, floor in effect.floors.items()
              if measured.get(name) is not None and measured[name] < floor]
    change = f"{effect.signal} {effect.before:.3f} -> {after:.3f} (predicted {effect.predicted:.3f})"
    if moved < needed:
        return Verdict(False, f"{change}: did not move as intended" + "".join(f"; {b}" for b in broken), record)
    if broken:
        return Verdict(False, f"{change}; but " + "; ".join(broken), record)
    return Verdict(True, change, record)


def change_context(policy: Policy, pool: PoolState, windows) -> tuple[dict[str, float], dict[str, float]]:
    """The floors a change must keep (those not already broken) and the signals before it, as evidence."""
    signals = pool.signals(windows)
    context = {k: v for k, v in signals.items() if v is not None}
    acceptance = signals["mtp_acceptance"]
    floors = {}
    if policy.mtp_acceptance_floor is not None and acceptance is not None and acceptance >= policy.mtp_acceptance_floor:
        floors["mtp_acceptance"] = policy.mtp_acceptance_floor
    return floors, context
