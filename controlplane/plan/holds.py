"""Why a knob of the pool takes no step this pass whatever its signals say, one definition for every knob's
planner (controlplane/plan/routing_limit.py, controlplane/plan/capacity_factor.py). Pure."""

from __future__ import annotations

from controlplane.desired import Policy
from controlplane.observed.knob_change import KnobChange
from controlplane.observed.pool import PoolState


def not_ready(policy: Policy, pool: PoolState, kind: str) -> str | None:
    """Too few fresh agents to judge the pool, or the knob's last change still awaits its verdict; None: neither."""
    if pool.num_agents == 0 or pool.num_fresh_agents < policy.min_fresh_agents_fraction * pool.num_agents:
        return f"only {pool.num_fresh_agents}/{pool.num_agents} agents are fresh"
    last = next((c for c in reversed(pool.changes) if c.knob == kind), None)
    if last is not None and last.status == "applied":
        return f"action {last.action_id} awaits its verdict"
    return None


def reversed_change(policy: Policy, pool: PoolState, kind: str, direction: int, now: float) -> KnobChange | None:
    """The knob's change within the policy's flap window that a step in `direction` (+1 up, -1 down) would
    reverse; None: there is none."""
    return next((c for c in reversed(pool.changes) if c.knob == kind and c.direction == -direction
                 and now - c.at < policy.flap_window_seconds), None)


def held_reason(policy: Policy, reason: str, reversed_: KnobChange, now: float) -> str:
    """The step's reason, held back by `reversed_`."""
    return (f"{reason}; held: it would reverse action {reversed_.action_id} of {now - reversed_.at:.0f}s ago within "
            f"the flap window ({policy.flap_window_seconds:.0f}s)")
