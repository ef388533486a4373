"""What a pool planner answers for a deployment (`PoolDecisions`: each pool's decision, the threshold's, the load
it sized for), and the interface every pool planner implements (`PoolPlanner`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from controlplane.observed.serving import PoolRole
from controlplane.solve.pools.capacity import LoadForecast
from controlplane.solve.pools.decision import PoolDecision, ThresholdDecision
from controlplane.solve.pools.view import PoolsView


@dataclass(frozen=True)
class PoolDecisions:
    at: float
    decisions: tuple[PoolDecision, ...]  # one per pool
    threshold: ThresholdDecision | None = None
    load: LoadForecast | None = None  # what it sized for: the forecast on a predictive tick, else the load now

    def decision(self, role: PoolRole) -> PoolDecision:
        return next(d for d in self.decisions if d.role == role)

    def decision_of(self, role: str) -> PoolDecision | None:
        """The role's decision; None for a pool this planner does not size (a unified pool beside prefill and
        decode pools: the PD planner sizes those two only)."""
        return next((d for d in self.decisions if d.role == role), None)

    def target(self, role: PoolRole) -> int:
        return self.decision(role).target

    @property
    def changes(self) -> tuple[PoolDecision, ...]:
        return tuple(d for d in self.decisions if d.direction != 0)

    @property
    def reason(self) -> str:
        return "; ".join(f"{d.role}: {d.reason}" for d in self.decisions)


@runtime_checkable
class PoolPlanner(Protocol):
    """Sizes the prefill and decode pools. The controller's (controlplane/plan/pools.py) is a pure
    function of the view; a baseline (benchmarks/baselines/) may keep state between calls, as the
    service it re-implements does. Called once per window, in time order."""

    name: str

    def plan(self, view: PoolsView) -> PoolDecisions: ...
