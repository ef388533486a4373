"""What a pool planner answers, and the interface every pool planner implements.

A decision names its pool, the size it found and the size it wants, and why (`kind`, `reason`). It carries
the effect it predicts (which SLO, which percentile, the predicted seconds at the new size), as the placement
plan does (controlplane/desired.py: PlacementChange.predicted, Plan.reason).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from enum import StrEnum
from typing import Protocol, runtime_checkable

from controlplane.observed.serving import PoolRole
from controlplane.solve.pools.capacity import LoadForecast
from controlplane.solve.pools.view import PoolsView


class DecisionKind(StrEnum):
    predictive = "predictive"  # sized from the load forecast and the latency model
    reactive = "reactive"  # a measured percentile breached its target: one replica more
    consolidate = "consolidate"  # fewer replicas still meet every target at the load they would carry
    budget = "budget"  # the joint GPU budget cut what the pool wanted
    hold = "hold"  # data stale or missing, or a change is still settling: no change
    keep = "keep"  # the pool is right as it is


@dataclass(frozen=True)
class PredictedEffect:
    """The SLO the decision is judged by: `slo` (e.g. ttft_p90) predicted at `seconds` with `replicas`."""

    slo: str
    seconds: float
    target_seconds: float
    replicas: int

    def as_dict(self) -> dict:
        return {k: round(v, 4) if isinstance(v, float) else v for k, v in asdict(self).items()}


@dataclass(frozen=True)
class PoolDecision:
    at: float
    role: PoolRole
    current: int  # ready + starting when decided
    target: int
    kind: DecisionKind
    reason: str
    predicted: PredictedEffect | None = None
    request_rate: float | None = None  # requests/s of the load it was sized for (None: not known)

    @property
    def direction(self) -> int:
        """+1 scale up, -1 scale down, 0 no change."""
        return (self.target > self.current) - (self.target < self.current)

    def predicted_dict(self) -> dict:
        """The effect recorded on the action and shown to people."""
        return self.predicted.as_dict() if self.predicted else {}


@dataclass(frozen=True)
class ThresholdDecision:
    """The PD-aware local-prefill threshold: prompts up to `target` tokens prefill on the decode pool."""

    at: float
    current: int
    target: int
    reason: str
    measured: dict

    @property
    def direction(self) -> int:
        return (self.target > self.current) - (self.target < self.current)


@dataclass(frozen=True)
class PoolDecisions:
    at: float
    decisions: tuple[PoolDecision, ...]  # one per pool
    threshold: ThresholdDecision | None = None
    load: LoadForecast | None = None  # what it sized for: the forecast on a predictive tick, else the load now

    def decision(self, role: PoolRole) -> PoolDecision:
        return next(d for d in self.decisions if d.role == role)

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
