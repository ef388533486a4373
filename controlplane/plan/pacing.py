"""Pacing: a pool's hourly allowances (placement changes, weights moved) spent so they never run dry. Pure:
(policy, pool, now) in, an `Allowance` out.

Half of each allowance (FREE_SHARE) may be spent as fast as the cooldown lets; the rest no faster than
evenly over the hour. Under drift (`is_drifting`) every change waits for the even pace and moves at most
what the hourly moves budget earned since the last one. Why, with the measurements:
docs/decisions/2026-11-30-pace-hourly-allowances.md, docs/decisions/2026-12-01-even-pace-under-drift.md.
"""

from __future__ import annotations

from dataclasses import dataclass

from controlplane.desired import KnobKind, Policy
from controlplane.observed.pool import PoolState
from controlplane.observed.window import expert_share
from controlplane.plan.parking import LOAD_SHIFT, load_shift

HOUR = 3600.0
FREE_SHARE = 0.5  # of an hourly allowance, spent as fast as the cooldown lets


@dataclass(frozen=True)
class Allowance:
    """What the next placement change may do: hold_reason is why none may happen now (None: one may);
    max_moved_slots: expert residencies (layer, slot) it may move."""

    hold_reason: str | None
    max_moved_slots: int = 0


def placement_allowance(policy: Policy, pool: PoolState, now: float) -> Allowance:
    """The cooldown, the hourly caps and their pacing, for the pool's next placement change at `now` (seconds)."""
    num_actions, max_actions = pool.num_actions_last_hour, policy.max_actions_per_hour
    since = None if pool.last_change_at is None else now - pool.last_change_at
    if num_actions >= max_actions:
        return Allowance(f"{num_actions} actions in the last hour, the policy allows {max_actions}")
    if since is not None and since < policy.cooldown_seconds:
        return Allowance(f"cooling down: last change {since:.0f}s ago, cooldown {policy.cooldown_seconds:.0f}s")
    # budgets count expert residencies (layer, slot): weights moved, whatever the layer
    num_residencies = pool.num_layers * pool.num_slots
    per_hour = int(policy.max_moved_slots_per_hour_fraction * num_residencies)
    is_moves_paced = pool.moved_slots_last_hour >= FREE_SHARE * per_hour
    even, is_drift = HOUR / max_actions, is_drifting(policy, pool)
    if since is not None and since < even and (is_drift or is_moves_paced):
        why = (f"the load drifts (the last change reached the threshold {policy.imbalance_threshold} and it moved "
               f"out again)" if is_drift else f"past {FREE_SHARE:.0%} of the hourly moves budget")
        return Allowance(f"pacing: {why}: changes come at the even pace, one per {even:.0f}s (next in "
                         f"{even - since:.0f}s)")
    ages = sorted(now - c.at for c in pool.changes if c.knob == KnobKind.placement and now - c.at < HOUR)
    # the new change and those no older than ages[i] are i + 2 changes within ages[i]; each such span must
    # have grown to HOUR * ((i + 2) / max_actions - FREE_SHARE) / (1 - FREE_SHARE)
    waits = [HOUR * ((i + 2) / max_actions - FREE_SHARE) / (1 - FREE_SHARE) - age for i, age in enumerate(ages)]
    if waits and max(waits) > 0:
        return Allowance(f"pacing: {len(ages)} changes in the last hour; the policy's {max_actions} an hour are "
                         f"spent at most {FREE_SHARE:.0%} at once, the rest evenly (next in {max(waits):.0f}s)")
    max_moved = min(int(policy.max_moved_slots_fraction * num_residencies), per_hour - pool.moved_slots_last_hour)
    if is_drift:  # a change's moves pay off until the load moves on: what the hourly budget earned since the last
        max_moved = min(max_moved, int(per_hour * since / HOUR))
    if max_moved <= 0:
        return Allowance(f"hourly moves budget spent ({pool.moved_slots_last_hour} slots moved)")
    if since is not None and is_moves_paced:
        paced = int((1 - FREE_SHARE) * per_hour * since / HOUR)
        if paced <= 0:
            return Allowance(f"pacing: {pool.moved_slots_last_hour} of {per_hour} slots of the hourly moves "
                             f"budget moved, the rest at {(1 - FREE_SHARE) * per_hour / HOUR:.2f} slots/s "
                             f"(last change {since:.0f}s ago)")
        max_moved = min(max_moved, paced)
    return Allowance(None, max_moved)


def is_drifting(policy: Policy, pool: PoolState) -> bool:
    """The last change did its job and the load has drifted on.

    The placement in force has been within the policy's imbalance threshold in some window under it, and the
    latest is above it. The load has not shifted materially since that window (parking.py's `LOAD_SHIFT`).
    A material shift (other experts hot) is a new load,
    answered at once. False without a change (nothing to have been undone) and while within the threshold (a
    change then is asked for, by a person, an alert or the MTP diagnosis, not drift)."""
    if pool.last_change_at is None:
        return False
    measured = [(w, m) for w in pool.current_windows() if (m := w.imbalance(pool.ep_size)) is not None]
    within = [w for w, m in measured if m <= policy.imbalance_threshold]
    if not within or measured[-1][1] <= policy.imbalance_threshold:
        return False
    latest = measured[-1][0]
    return load_shift(expert_share(within[-1].expert_tokens), expert_share(latest.expert_tokens)) < LOAD_SHIFT
