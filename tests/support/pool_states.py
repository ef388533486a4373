"""Builders of the loop's observed pool (`controlplane/observed/pool.py` `PoolState`) for the planner's tests."""

from __future__ import annotations

from controlplane.desired import KnobKind
from controlplane.observed.knob_in_force import KnobInForce


def routing_in_force(topk_group: int | None, changed_at: float | None) -> dict[str, KnobInForce]:
    """`PoolState.in_force` with the routing limit `topk_group` issued at `changed_at` (None: never changed,
    version 0)."""
    return {KnobKind.routing: KnobInForce(0 if changed_at is None else 1, topk_group, changed_at)}
