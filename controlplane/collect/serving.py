"""Serving windows: a rank's serving counters and a router's window as flat counters, merged over the
ranks of an instance (or the routers of a deployment), and read back as what the pool planner sees
(controlplane/solve/pools/view.py). Pure.

A latency distribution travels as `<name>_count`, `<name>_sum` and `<name>_p50|p90|p99`: counts and sums
add up, a percentile of the whole is bounded by the worst part's (the max), never averaged. The ranks of
one instance step in lockstep, so its busy time and steps are any rank's (the max), not their sum.
A router window also says the local-prefill threshold it routed by (`local_prefill_threshold`), and its arrivals
per prompt-length bucket travel as `prompt_bucket_<i>` counters (added up like any count); a deployment window whose
buckets do not add up to its arrivals (a router that does not count them) has no length mix.
"""

from __future__ import annotations

from agents.protocol import NUM_PROMPT_BUCKETS, LatencySummary, RankRow, RouterWindow, Snapshot
from controlplane.solve.pools.view import PoolRole, PoolWindow, ReplicaWindow

PERCENTILES = ("p50", "p90", "p99")
# the same clock on every rank of an instance; the threshold every router of a deployment is told
MAXIMA = ("busy_seconds", "num_steps", "local_prefill_threshold")
SUMMARIES = ("ttft", "ttft_local", "ttft_remote", "itl", "request_seconds", "kv_transfer")


def _flat(name: str, summary: LatencySummary) -> dict[str, float]:
    out = {f"{name}_count": float(summary.count), f"{name}_sum": summary.sum}
    return out | {f"{name}_{p}": getattr(summary, p) for p in PERCENTILES if getattr(summary, p) is not None}


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


def replica_counters(snapshot: Snapshot | RankRow) -> dict[str, float] | None:
    """One rank's part of its instance's window (its v1 snapshot, or its row of a v2 group snapshot); None from
    an agent that does not measure serving work."""
    serving = snapshot.serving
    if serving is None:
        return None
    return serving.model_dump() | {"num_steps": float(snapshot.num_steps)} | _flat("ttft", snapshot.ttft) | \
        _flat("itl", snapshot.itl)


def router_counters(window: RouterWindow) -> dict[str, float]:
    counts = window.model_dump(include={"num_arrivals", "num_local", "input_tokens", "num_finished", "output_tokens",
                                        "num_failed"})
    out = {k: float(v) for k, v in counts.items()}
    if window.local_prefill_threshold is not None:
        out["local_prefill_threshold"] = float(window.local_prefill_threshold)
    if window.prompt_buckets is not None:
        out |= {f"prompt_bucket_{i}": float(count) for i, count in enumerate(window.prompt_buckets)}
    for name in SUMMARIES:
        out |= _flat(name, getattr(window, name))
    return out


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
