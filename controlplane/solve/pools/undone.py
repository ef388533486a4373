"""A consolidation judged by its effect: one the pool had to undo is not made again at the load that undid it.

Near saturation the fitted model can be wrong, and the same check at the same load would consolidate,
breach and scale back up every cooldown (docs/decisions/2026-12-01-remember-undone-consolidations.md).
So after a consolidation to M was undone within `within_seconds`, the pool does not go to M or fewer again
for `memory_seconds` while the load is at least `load_share` of the load the scale-up back was sized for.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from controlplane.observed.serving import PoolRole
from controlplane.solve.pools.decision import DecisionKind, PoolDecision


@dataclass(frozen=True)
class Undone:
    """A consolidation to `replicas` undone at `at` by a scale-up sized for `request_rate` (requests/s)."""

    replicas: int
    at: float
    request_rate: float

    def is_repeated_at(self, request_rate: float, load_share: float) -> bool:
        """True when going to `replicas` or fewer at `request_rate` (requests/s) repeats what was undone."""
        return request_rate >= load_share * self.request_rate


def last_undone(role: PoolRole, history: Sequence[PoolDecision], now: float, *, within_seconds: float,
                memory_seconds: float) -> Undone | None:
    """The pool's latest consolidation that a scale-up undid within `within_seconds`, if that scale-up came
    less than `memory_seconds` before `now` and knows the load it was sized for."""
    changes = [d for d in history if d.role == role and d.direction != 0]
    for down, up in zip(reversed(changes[:-1]), reversed(changes[1:]), strict=True):
        if now - up.at > memory_seconds:
            return None
        if down.kind == DecisionKind.consolidate and up.direction > 0 and up.current <= down.target and \
                up.at - down.at <= within_seconds and up.request_rate is not None:
            return Undone(down.target, up.at, up.request_rate)
    return None
