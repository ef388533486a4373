"""What a pool planner sees: the prefill and decode pools of one PD-disaggregated deployment at `now`.

Windows are what the agents and the router measured; a field that was not measured is None, never 0
(a planner holds on missing data instead of reading it as idle). Seconds are wall-clock seconds,
tokens are tokens, rates are per second.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Literal

import numpy as np

from agents.protocol import LatencySummary

if TYPE_CHECKING:
    from controlplane.solve.pools.decision import PoolDecision, ThresholdDecision

PoolRole = Literal["prefill", "decode"]
ROLES: tuple[PoolRole, PoolRole] = ("prefill", "decode")


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

    @property
    def num_serving(self) -> int:
        """Replicas counted toward the pool's size: ready plus starting (draining ones are leaving)."""
        return self.num_ready + self.num_starting


@dataclass(frozen=True)
class ReplicaWindow:
    """One replica's window.

    prefill role: ttft is arrival to KV ready on the decode side (queue, prefill, hand-off) for the
    requests it prefilled; decode role: itl is per generated token, batch and kv_tokens are
    time-weighted means over the window, prefill_tokens are the short prompts it prefilled locally.
    """

    replica: str
    role: PoolRole
    age_windows: int  # complete windows since it became ready: 0 is its first (cold) one
    busy_seconds: float  # time inside engine steps
    num_steps: int = 0  # engine steps (iterations) in the window
    prefill_tokens: float = 0.0
    num_prefilled: int = 0  # requests whose prefill finished here
    queued_tokens: float = 0.0  # prompt tokens waiting at the window's end
    num_waiting: int = 0  # decode: requests waiting for KV room at the window's end
    ttft: LatencySummary | None = None
    batch: float = 0.0
    kv_tokens: float = 0.0
    kv_capacity_tokens: float = 0.0
    max_batch: int = 0
    itl: LatencySummary | None = None


@dataclass(frozen=True)
class PoolWindow:
    """The deployment's window, both pools. ttft/itl are end to end over all requests; ttft_local and
    ttft_remote split TTFT by where the prompt was prefilled (decode instance vs prefill pool)."""

    end: float
    seconds: float
    num_arrivals: int | None
    mean_input_tokens: float | None
    mean_output_tokens: float | None  # of the requests that finished in the window
    local_prefill_share: float | None  # share of arrivals prefilled on the decode pool
    ttft: LatencySummary | None
    itl: LatencySummary | None
    ttft_local: LatencySummary | None = None
    ttft_remote: LatencySummary | None = None
    request_seconds: LatencySummary | None = None  # arrival to last token
    replicas: tuple[ReplicaWindow, ...] = ()
    # [NUM_PROMPT_BUCKETS] arrivals per prompt-length bucket (agents.protocol.PROMPT_BUCKET_TOKENS); None: only the
    # mean length was measured
    prompt_buckets: tuple[int, ...] | None = None

    def of_role(self, role: PoolRole) -> tuple[ReplicaWindow, ...]:
        return tuple(r for r in self.replicas if r.role == role)

    @cached_property
    def columns(self) -> dict[PoolRole, dict[str, np.ndarray]]:
        """role -> name -> [replicas] the replica windows as arrays (latencies NaN where not measured):
        age_windows, busy_seconds, prefill_tokens, num_prefilled, queued_tokens, batch, kv_tokens, ttft_mean,
        ttft_p90, ttft_p99, itl_mean, itl_p90, itl_p99, itl_count (token gaps measured, 0 where none). Computed once
        per window; learners read many windows at once."""
        def value(summary: LatencySummary | None, name: str) -> float:
            if summary is None or summary.count == 0:
                return np.nan
            if name == "mean":
                return summary.sum / summary.count
            measured = getattr(summary, name)
            return np.nan if measured is None else measured

        out = {}
        for role in ROLES:
            mine = self.of_role(role)
            out[role] = {
                name: np.array([getattr(r, name) for r in mine], dtype=np.float64)
                for name in ("age_windows", "busy_seconds", "prefill_tokens", "num_prefilled", "queued_tokens", "batch",
                             "kv_tokens")}
            for metric in ("ttft", "itl"):
                for name in ("mean", "p90", "p99"):
                    out[role][f"{metric}_{name}"] = np.array([value(getattr(r, metric), name) for r in mine])
            out[role]["itl_count"] = np.array([0.0 if r.itl is None else float(r.itl.count) for r in mine])
        return out


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
