"""The per-expert capacity factor's planner: pure. (policy, observed pool, now) -> a step for the pool's cap.

The cap (`RoutingLimits.expert_capacity_factor`, applied by agents/telemetry/agent.py) lets each expert take at
most `factor` times an even share of a step's token-expert assignments and drops the rest: it bounds the hot GPU's
straggler time at the cost of the dropped assignments, a loss of model quality. The placement relieves the same
imbalance without that loss, so the cap is planned from two measurements only:

- **the imbalance the placement cannot relieve**: the pool's imbalance floor (the lowest max/mean any placement
  of its slots reaches on the last window's load, controlplane/solve/placement/packing.py) over the policy's
  `imbalance_threshold`, with the measured imbalance over it too for the sustained windows. Then the cap is
  tightened one step (from `expert_capacity_factor_max` down to `expert_capacity_factor_min`), predicting the
  imbalance the windows would have measured with each expert's load capped (`capped_imbalance`);
- **the assignments it dropped**: the agents' `dropped_tokens` over the routed assignments (`dropped_share`).
  Over the policy's `max_dropped_share` the cap is loosened one step (lifted past the max), predicting the drops
  scaled as the capped window loads scale.

A tightening is verified by the imbalance it aims at, a loosening by the dropped share, as every change is
(controlplane/plan/effect.py, controlplane/loop/verify.py). Windows are the ones since the cap's last change; a
step waits for the verdict on the one before, a parked cap stays put until its inputs change materially, and no
step reverses a change within the flap window.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from agents.protocol.placement import PlacementTable
from controlplane.desired import Decision, Effect, KnobKind, Mode, Policy
from controlplane.observed.pool import PoolState
from controlplane.plan.effect import change_context
from controlplane.plan.holds import held_reason, not_ready, reversed_change
from controlplane.plan.knob_plan import Given, KnobPlan, Move
from controlplane.plan.retry import parked_reason
from controlplane.solve.placement.packing import imbalance_floor

STEP = 1.25  # one step multiplies (loosen) or divides (tighten) the factor by this
UNCAPPED = float("inf")  # None, the agents' default, compared as a cap


@dataclass(frozen=True)
class CapacityStep:
    factor: float | None  # None: no cap
    reason: str
    effect: Effect | None = None  # what the step aims at; None for holds
    unparked: str | None = None  # the knob was parked and its inputs changed materially: why

    def is_change_from(self, current: float | None) -> bool:
        return self.factor != current


def capped_load(expert_tokens: np.ndarray, factor: float | None) -> np.ndarray:
    """[num_layers, num_experts] tokens with each expert's capped at `factor` times its layer's even share (the
    mean expert's): the load had the cap held over the window's sum. Exact when every step routes the window's
    mix in full batches; a burstier step drops more than this."""
    load = np.asarray(expert_tokens, np.float64)
    if factor is None:
        return load
    return np.minimum(load, factor * load.mean(axis=1, keepdims=True))


def capped_imbalance(table: PlacementTable, windows, num_gpus: int, factor: float | None) -> float | None:
    """Mean over `windows` of `table`'s max/mean GPU load on their capped expert load; None without expert load."""
    values = [table.imbalance(capped_load(w.expert_tokens, factor), num_gpus) for w in windows]
    return None if not values or None in values else float(np.mean(values))


def _dropped_estimate(windows, factor: float | None) -> float:
    """The share of the windows' assignments a cap at `factor` drops on their summed load."""
    routed = sum(float(w.expert_tokens.sum()) for w in windows)
    kept = sum(float(capped_load(w.expert_tokens, factor).sum()) for w in windows)
    return (routed - kept) / routed if routed > 0 else 0.0


def plan_capacity_factor(policy: Policy, pool: PoolState, now: float) -> CapacityStep:
    current = pool.knob(KnobKind.expert_capacity).value
    if policy.mode == Mode.off or policy.max_dropped_share is None:
        return CapacityStep(current, "the capacity factor is not managed by this policy (no max_dropped_share)")
    why = not_ready(policy, pool, KnobKind.expert_capacity)
    if why is not None:
        return CapacityStep(current, why)
    windows = pool.windows_since_change(KnobKind.expert_capacity)[-policy.sustained_windows:]
    measured = [w.imbalance(pool.ep_size) for w in windows]
    if len(windows) < policy.sustained_windows or any(m is None for m in measured):
        return CapacityStep(current, "not enough windows with expert load since the cap's last change")
    changed_at = pool.knob(KnobKind.expert_capacity).changed_at
    if changed_at is not None and now - changed_at < policy.cooldown_seconds:
        return CapacityStep(current, "cooling down")
    still_parked, unparked = parked_reason(pool, KnobKind.expert_capacity, with_expert_share=True, now=now)
    if still_parked:
        return CapacityStep(current, still_parked)
    signals = pool.signals(windows)
    dropped = signals["dropped_share"] or 0.0
    step = _step(policy, pool, windows, current, measured, dropped)
    if not step.is_change_from(current):
        return replace(step, unparked=unparked)
    direction = 1 if (step.factor or UNCAPPED) > (current or UNCAPPED) else -1
    reversed_ = reversed_change(policy, pool, KnobKind.expert_capacity, direction, now)
    if reversed_ is not None:
        return CapacityStep(current, held_reason(policy, step.reason, reversed_, now), unparked=unparked)
    floors, context = change_context(policy, pool, windows)
    assert step.effect is not None  # every move below carries its effect
    effect = replace(step.effect, floors=step.effect.floors | floors, context=context)
    return replace(step, effect=effect, unparked=unparked,
                   reason=step.reason if unparked is None else f"{step.reason} (unparked: {unparked})")


def _step(policy: Policy, pool: PoolState, windows, current: float | None, measured: list[float],
          dropped: float) -> CapacityStep:
    """The move the measurements ask for, before the flap window and the floors are applied."""
    tolerance = policy.rollback_tolerance
    if current is not None and dropped > policy.max_dropped_share:
        loosened = current * STEP
        factor = None if loosened > policy.expert_capacity_factor_max else round(loosened, 2)
        now_estimate = _dropped_estimate(windows, current)
        ratio = _dropped_estimate(windows, factor) / now_estimate if now_estimate > 0 else 0.0
        return CapacityStep(factor, f"dropped {dropped:.2%} of assignments > max_dropped_share "
                                    f"{policy.max_dropped_share:.2%}: cap {current} -> {factor or 'none'}",
                            Effect("dropped_share", -1, dropped, dropped * ratio, policy.max_dropped_share / 2))
    floor = imbalance_floor(windows[-1].expert_tokens, pool.num_slots, pool.ep_size)
    if floor is None or floor <= policy.imbalance_threshold:
        return CapacityStep(current, "the placement can bring the imbalance under the threshold: no cap needed"
                            if floor is not None else "the last window carries no expert load")
    if min(measured) <= policy.imbalance_threshold:
        return CapacityStep(current, f"imbalance {measured[-1]:.3f} within threshold {policy.imbalance_threshold}")
    if dropped > policy.max_dropped_share / 2:
        return CapacityStep(current, f"dropped {dropped:.2%} of assignments: no room under max_dropped_share "
                                     f"{policy.max_dropped_share:.2%} to tighten")
    lowest = policy.expert_capacity_factor_min
    if current is not None and current <= lowest:
        return CapacityStep(current, f"cap {current} is the policy's tightest (expert_capacity_factor_min)")
    factor = round(max(lowest, policy.expert_capacity_factor_max if current is None else current / STEP), 2)
    before = float(np.mean(measured))
    predicted = capped_imbalance(pool.placement, windows, pool.ep_size, factor)
    had = capped_imbalance(pool.placement, windows, pool.ep_size, current)
    if predicted is None or had is None or had - predicted < policy.min_gain:
        return CapacityStep(current, f"a cap of {factor} would cut the imbalance by under min_gain {policy.min_gain}")
    return CapacityStep(factor, f"the pool's shape is the limit (no placement gets under {floor:.3f}) and imbalance "
                                f"{measured[-1]:.3f} > {policy.imbalance_threshold} for {len(measured)} windows: cap "
                                f"{current or 'none'} -> {factor} (dropping ~{_dropped_estimate(windows, factor):.2%})",
                        Effect("imbalance", -1, before, before - (had - predicted), tolerance))


def _decide(given: Given) -> CapacityStep | None:
    """None while the placement moves this pass (one change of the pool's imbalance per pass)."""
    if given.earlier[KnobKind.placement].decision == Decision.rebalance:
        return None
    return plan_capacity_factor(given.policy, given.inputs.state, given.now)


def _moves(step: CapacityStep | None, policy: Policy, state: PoolState, role: str) -> list[Move]:
    """The cap `step` moves to, with the windows it was decided on."""
    current = state.knob(KnobKind.expert_capacity).value
    if step is None or not step.is_change_from(current):
        return []
    windows_used = state.windows_since_change(KnobKind.expert_capacity)[-policy.sustained_windows:]
    signals = state.signals(windows_used)
    inputs = {"windows": [w.index for w in windows_used], "expert_capacity_factor": current,
              "measured_imbalance": [round(w.imbalance(state.ep_size) or 0.0, 4) for w in windows_used],
              "dropped_share": None if signals["dropped_share"] is None else round(signals["dropped_share"], 6)}
    predicted = {"factor_before": current, "factor_after": step.factor}
    if step.effect is not None:
        predicted["effect"] = step.effect.to_json()
    return [Move(KnobKind.expert_capacity, step.factor, step.reason, inputs, predicted,
                 f"capacity factor {current or 'none'} -> {step.factor or 'none'} ({step.reason})")]


CAPACITY_PLAN = KnobPlan(KnobKind.expert_capacity, _decide, _moves)
