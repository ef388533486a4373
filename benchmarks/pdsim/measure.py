"""Windows as the agents and the router would report them: per replica and for the deployment.

A percentile of fewer than MIN_SAMPLES latencies is not reported (None): a p99 of three requests is
noise, not a measurement.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from agents.protocol import NUM_PROMPT_BUCKETS, PROMPT_BUCKET_TOKENS, LatencySummary
from benchmarks.pdsim.decode_replica import DecodeReplica
from benchmarks.pdsim.replicas import PrefillReplica, Replica
from benchmarks.pdsim.requests import Requests
from controlplane.observed.serving import PoolWindow, ReplicaWindow

MIN_SAMPLES = 5


def summarize(samples, weights=None) -> LatencySummary | None:
    """Latency distribution of `samples` (seconds), each counted `weights` times (default once)."""
    values = np.asarray(samples, dtype=np.float64)
    if values.size == 0:
        return None
    counts = np.ones_like(values) if weights is None else np.asarray(weights, dtype=np.float64)
    total = float(counts.sum())
    if total < MIN_SAMPLES:
        return LatencySummary(count=int(total), sum=float((values * counts).sum()))
    order = np.argsort(values)
    cumulative = np.cumsum(counts[order]) / total
    p50, p90, p99 = (float(values[order][np.searchsorted(cumulative, q)]) for q in (0.5, 0.9, 0.99))
    return LatencySummary(count=int(total), sum=float((values * counts).sum()), p50=p50, p90=p90, p99=p99)


def prompt_buckets(input_tokens: np.ndarray) -> tuple[int, ...]:
    """[NUM_PROMPT_BUCKETS] prompts per length bucket, as a router counts them (agents.protocol.prompt_bucket)."""
    index = np.searchsorted(np.asarray(PROMPT_BUCKET_TOKENS), input_tokens, side="left")
    return tuple(int(n) for n in np.bincount(index, minlength=NUM_PROMPT_BUCKETS))


@dataclass
class WindowLog:
    """Requests that arrived, got their first token, or finished in the current window; and every
    window's token gaps so far ([k, 3] arrays of (window end, seconds, tokens that waited that long))."""

    arrivals: list = field(default_factory=list)
    first_tokens: list = field(default_factory=list)
    finished: list = field(default_factory=list)
    token_gaps: list = field(default_factory=list)

    def clear(self) -> None:
        self.arrivals.clear()
        self.first_tokens.clear()
        self.finished.clear()


def _replica_window(replica: Replica, window_seconds: float, now: float) -> ReplicaWindow:
    age = max(0, int((now - replica.ready_at) // window_seconds) - 1)
    if isinstance(replica, PrefillReplica):
        out = ReplicaWindow(replica.name, "prefill", age, replica.busy_seconds, num_steps=replica.window_steps,
                            prefill_tokens=replica.prefill_tokens, num_prefilled=replica.num_prefilled,
                            queued_tokens=replica.queued_tokens, ttft=summarize(replica.ttft_samples))
        replica.num_prefilled, replica.ttft_samples = 0, []
    else:
        assert isinstance(replica, DecodeReplica)
        steps = np.asarray(replica.itl_steps, dtype=np.float64).reshape(-1, 2)
        out = ReplicaWindow(replica.name, "decode", age, replica.busy_seconds, num_steps=replica.window_steps,
                            prefill_tokens=replica.prefill_tokens, num_prefilled=replica.num_local,
                            queued_tokens=float(sum(item[1] for item in replica.prefilling)),
                            num_waiting=len(replica.pending), batch=replica.batch_seconds / window_seconds,
                            kv_tokens=replica.kv_seconds / window_seconds,
                            kv_capacity_tokens=float(replica.kv_capacity), max_batch=replica.max_batch,
                            itl=summarize(steps[:, 0], steps[:, 1]))
        replica.batch_seconds = replica.kv_seconds = 0.0
        replica.itl_steps, replica.num_local = [], 0
    replica.busy_seconds = replica.prefill_tokens = 0.0
    replica.window_steps = 0
    return out


def pool_window(now: float, window_seconds: float, log: WindowLog, requests: Requests,
                replicas: list[Replica]) -> PoolWindow:
    """The deployment's window ending at `now`; resets every replica's accumulators and the log."""
    itl_steps = [step for r in replicas if isinstance(r, DecodeReplica) for step in r.itl_steps]
    steps = np.asarray(itl_steps, dtype=np.float64).reshape(-1, 2)
    log.token_gaps.append(np.column_stack([np.full(len(steps), now), steps]))
    arrived = np.asarray(log.arrivals, dtype=np.int64)
    first = np.asarray(log.first_tokens, dtype=np.int64)
    done = np.asarray(log.finished, dtype=np.int64)
    ttft = requests.first_token[first] - requests.arrival[first]
    local = requests.is_local[first]
    window = PoolWindow(
        end=now, seconds=window_seconds, num_arrivals=int(arrived.size),
        mean_input_tokens=float(requests.input_tokens[arrived].mean()) if arrived.size else None,
        mean_output_tokens=float(requests.output_tokens[done].mean()) if done.size else None,
        local_prefill_share=float(requests.is_local[arrived].mean()) if arrived.size else None,
        ttft=summarize(ttft), itl=summarize(steps[:, 0], steps[:, 1]),
        ttft_local=summarize(ttft[local]), ttft_remote=summarize(ttft[~local]),
        request_seconds=summarize(requests.finish[done] - requests.arrival[done]),
        prompt_buckets=prompt_buckets(requests.input_tokens[arrived]),
        replicas=tuple(_replica_window(r, window_seconds, now) for r in replicas if r.ready_at <= now))
    log.clear()
    return window
