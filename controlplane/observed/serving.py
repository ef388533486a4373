"""A deployment's serving windows as read back: each replica's and the routers', and how the counters of
one window add up over the ranks of an instance (or the routers of a deployment).

A latency distribution travels as `<name>_count`, `<name>_sum` and `<name>_p50|p90|p99`: counts and sums
add up, a percentile of the whole is bounded by the worst part's (the max), never averaged. The ranks of
one instance step in lockstep, so its busy time and steps are any rank's (the max), not their sum. A field
that was not measured is None, never 0 (a planner holds on missing data instead of reading it as idle).
Seconds are wall-clock seconds, tokens are tokens, rates are per second.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Literal

import numpy as np

from agents.protocol import NUM_PROMPT_BUCKETS, LatencySummary

PoolRole = Literal["prefill", "decode"]
ROLES: tuple[PoolRole, PoolRole] = ("prefill", "decode")
THRESHOLD_ROLE: PoolRole = "decode"  # the pool whose instances prefill the short prompts: it holds the threshold
PERCENTILES = ("p50", "p90", "p99")
# the same clock on every rank of an instance; the threshold every router of a deployment is told
MAXIMA = ("busy_seconds", "num_steps", "local_prefill_threshold")


@dataclass(frozen=True)
class ReplicaWindow:
    """One replica's window.

    Prefill role: ttft is arrival to KV ready on the decode side (queue, prefill, hand-off) for the
    requests it prefilled. Decode role: itl is per generated token, batch and kv_tokens are
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


def summary(counters: dict[str, float], name: str) -> LatencySummary | None:
    """The distribution `name` of merged counters; None when nothing was measured (never an empty one)."""
    count = int(counters.get(f"{name}_count", 0))
    if count == 0:
        return None
    return LatencySummary(count=count, sum=counters.get(f"{name}_sum", 0.0),
                          **{p: counters.get(f"{name}_{p}") for p in PERCENTILES})


def merge(total: dict[str, float], part: dict[str, float]) -> dict[str, float]:
    merged = dict(total)
    for name, value in part.items():
        is_max = name.endswith(PERCENTILES) or name in MAXIMA
        merged[name] = max(merged.get(name, value), value) if is_max else merged.get(name, 0.0) + value
    return merged


def prompt_buckets(counters: dict[str, float]) -> tuple[int, ...] | None:
    """[NUM_PROMPT_BUCKETS] arrivals per prompt-length bucket of merged router counters; None unless every
    arrival was counted in one (a router that does not count them posted part of the window)."""
    buckets = tuple(int(counters.get(f"prompt_bucket_{i}", 0)) for i in range(NUM_PROMPT_BUCKETS))
    arrivals = int(counters.get("num_arrivals", 0))
    return buckets if arrivals and sum(buckets) == arrivals else None


def replica_window(instance: str, role: PoolRole, age_windows: int, c: dict[str, float]) -> ReplicaWindow:
    return ReplicaWindow(
        replica=instance, role=role, age_windows=age_windows, busy_seconds=c.get("busy_seconds", 0.0),
        num_steps=int(c.get("num_steps", 0)), prefill_tokens=c.get("prefill_tokens", 0.0),
        num_prefilled=int(c.get("num_prefilled", 0)), queued_tokens=c.get("queued_tokens", 0.0),
        num_waiting=int(c.get("num_waiting", 0)), ttft=summary(c, "ttft"), batch=c.get("batch_mean", 0.0),
        kv_tokens=c.get("kv_tokens_mean", 0.0), kv_capacity_tokens=c.get("kv_capacity_tokens", 0.0),
        max_batch=int(c.get("max_batch", 0)), itl=summary(c, "itl"))


def pool_window(end: float, seconds: float, router: dict[str, float] | None,
                replicas: tuple[ReplicaWindow, ...]) -> PoolWindow:
    """router: the routers' merged counters of the window; None when no router reported it (then nothing
    about arrivals or end-to-end latency is known: the planner holds, it never reads that as no traffic)."""
    if router is None:
        return PoolWindow(end, seconds, None, None, None, None, None, None, replicas=replicas)
    arrivals, finished = int(router.get("num_arrivals", 0)), router.get("num_finished", 0)
    return PoolWindow(
        end=end, seconds=seconds, num_arrivals=arrivals,
        mean_input_tokens=router["input_tokens"] / arrivals if arrivals else None,
        mean_output_tokens=router["output_tokens"] / finished if finished else None,
        local_prefill_share=router["num_local"] / arrivals if arrivals else None,
        ttft=summary(router, "ttft"), itl=summary(router, "itl"), ttft_local=summary(router, "ttft_local"),
        ttft_remote=summary(router, "ttft_remote"), request_seconds=summary(router, "request_seconds"),
        replicas=replicas, prompt_buckets=prompt_buckets(router))
