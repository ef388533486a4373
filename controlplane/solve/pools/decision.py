"""What a pool planner decides, one pool (or the threshold) at a time: the types at the bottom of solve/pools
(the view, solve/pools/view.py, carries past decisions; what a planner answers in all is solve/pools/planning.py).

A decision names its pool, the size it found and the size it wants, and why (`kind`, `reason`). It carries
the effect it predicts (which SLO, which percentile, the predicted seconds at the new size), as the placement
plan does (controlplane/desired.py: PlacementChange.predicted, Plan.reason).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from enum import StrEnum

from controlplane.observed.serving import PoolRole


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
