"""What a pool planner sees: the prefill and decode pools of one PD-disaggregated deployment at `now`,
their latency targets and the windows (controlplane/observed/serving.py). Seconds are wall-clock seconds."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from agents.protocol import LatencySummary
from controlplane.observed.serving import PoolRole, PoolWindow
from controlplane.solve.pools.decision import PoolDecision, ThresholdDecision


@dataclass(frozen=True)
class SloTarget:
    """`metric` at `percentile` stays at or under `seconds` (TTFT includes queue time)."""

    metric: Literal["ttft", "itl"]
    percentile: Literal[90, 99]
    seconds: float

    @property
    def name(self) -> str:
        return f"{self.metric}_p{self.percentile}"

    def of(self, summary: LatencySummary | None) -> float | None:
        """This target's percentile of a measured distribution (None: not measured)."""
        if summary is None or summary.count == 0:
            return None
        return summary.p90 if self.percentile == 90 else summary.p99


def role_targets(role: PoolRole, targets: tuple[SloTarget, ...]) -> tuple[SloTarget, ...]:
    """The targets a pool is sized by: TTFT for prefill, ITL for decode."""
    return tuple(t for t in targets if t.metric == ("ttft" if role == "prefill" else "itl"))


@dataclass(frozen=True)
class PoolSize:
    """One pool's replicas: ready serve, starting hold GPUs but serve nothing yet, draining finish
    their in-flight work and take no new work. Bounds apply to ready + starting."""

    num_ready: int
    num_starting: int = 0
    num_draining: int = 0
    gpus_per_replica: int = 1
    min_replicas: int = 1
    max_replicas: int = 64
    num_unschedulable: int = 0  # asked, not placed (a full cluster); last: callers pass the rest by position

    @property
    def num_serving(self) -> int:
        """Replicas counted toward the pool's size: ready plus starting (draining ones are leaving)."""
        return self.num_ready + self.num_starting


@dataclass(frozen=True)
class PoolsView:
    """Everything a pool planner may read at `now`. windows: oldest first; history and
    threshold_history: the changes applied before (oldest first), hysteresis is judged from them."""

    now: float
    windows: tuple[PoolWindow, ...]
    pools: dict[PoolRole, PoolSize]
    targets: tuple[SloTarget, ...]
    local_prefill_threshold: int
    gpu_budget: int | None = None
    history: tuple[PoolDecision, ...] = field(default_factory=tuple)
    threshold_history: tuple[ThresholdDecision, ...] = field(default_factory=tuple)

    @property
    def latest(self) -> PoolWindow | None:
        return self.windows[-1] if self.windows else None

    def targets_of(self, metric: str) -> tuple[SloTarget, ...]:
        return tuple(t for t in self.targets if t.metric == metric)
