"""An applied change of one of a pool's knobs, as the planners' holds and the MTP diagnosis read it
(controlplane/plan/holds.py, controlplane/plan/diagnose.py). Pure."""

from __future__ import annotations

from dataclasses import dataclass

from controlplane.desired import Effect


@dataclass(frozen=True)
class KnobChange:
    """An applied change of one of the pool's knobs, whoever asked for it. direction: +1 the knob's value
    went up (a looser routing limit), -1 down, 0 the knob has no order (a placement)."""

    action_id: int
    knob: str
    at: float
    status: str
    direction: int
    effect: Effect | None = None
