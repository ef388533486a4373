"""What one of a pool's one-number knobs holds now, as the controller last issued it: one shape for every such knob
(the routing limit, and any added in controlplane/store/knobs.py), so `PoolState` carries them as one mapping from
the knob's kind to this instead of a field per knob."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class KnobInForce:
    """version 0 (value None) is the agents' default: nothing issued by moectl, no change to judge."""

    version: int = 0
    value: int | float | None = None
    changed_at: float | None = None  # unix seconds `version` was issued; None for version 0

    @classmethod
    def issued(cls, version: int, value: int | float | None, created_at: float) -> KnobInForce:
        """The knob's latest version as stored: version 0 is no change, whatever its row's time."""
        return cls(version, value, created_at if version > 0 else None)
