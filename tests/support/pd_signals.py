"""Simulated serving signals of a PD-disaggregated deployment, as its agents and router post them: one window of
every ready instance (one rank reports for it) and the router's window, from a load and the instances serving it.

The engines are closed-form, in the very forms the pool planner fits (controlplane/learn/latency.py), so what it
learns from these windows is what they were made from and its decisions follow from the numbers here:
- prefill: a replica offered T prompt tokens/s of capacity C runs at rho = T/C (busy rho x the window) and its TTFT
  percentile is a + b_p * s * rho/(1-rho) + c * s, s = prompt tokens / C;
- decode: a replica settles at batch B = demand x ITL(B) (Little's law), ITL = a + k * B, its percentiles a fixed
  multiple of the mean.
The router spreads requests a few percent unevenly and prompts differ a little per replica (`_spread`): windows
that were all alike would leave the fit's intercept and slopes apart unknown. Seconds, tokens, tokens/s, req/s.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np

from agents.protocol import Array, Identity, LatencySummary, RouterWindow, ServingCounters, Snapshot
from support.store import MODEL, SLOTS_PER_RANK

PREFILL_CAPACITY = 50_000.0  # prompt tokens/s of one prefill replica
PREFILL_TTFT = {90: (0.05, 1.0, 1.0), 99: (0.05, 2.5, 1.0)}  # percentile -> (a, b, c)
DECODE_ITL = (0.01, 0.0002)  # (a, k): ITL mean = a + k x batch
ITL_PERCENTILE = {90: 1.25, 99: 1.5}  # ITL percentile / mean
KV_CAPACITY, MAX_BATCH = 1_000_000, 256  # one decode replica's


@dataclass(frozen=True)
class Traffic:
    rate: float  # requests/s arriving at the router
    prompt_tokens: float
    output_tokens: float


def prefill_utilisation(traffic: Traffic, replicas: int) -> float:
    """Of a prefill replica's capacity, with the load spread evenly over `replicas`."""
    return traffic.rate * traffic.prompt_tokens / replicas / PREFILL_CAPACITY


def decode_itl(traffic: Traffic, replicas: int, percentile: int = 90) -> float:
    """A decode replica's ITL percentile with the load spread evenly over `replicas` (inf: it cannot settle)."""
    a, k = DECODE_ITL
    demand = traffic.rate / replicas * max(traffic.output_tokens - 1, 0.0)
    if k * demand >= 1:
        return float("inf")
    return (a + k * a * demand / (1 - k * demand)) * ITL_PERCENTILE[percentile]


def _spread(instance: str, salt: str, width: float) -> float:
    """1 +- width, fixed per instance."""
    digest = hashlib.sha256(f"{salt}/{instance}".encode()).digest()
    return 1.0 + width * (2 * int.from_bytes(digest[:4], "big") / 2**32 - 1)


def _latency(value: float, count: int, percentiles: dict[int, float]) -> LatencySummary:
    """count samples: p50 at `value`, p90/p99 at the given values."""
    return LatencySummary(count=count, sum=count * value, p50=value, p90=percentiles[90], p99=percentiles[99])


def _prefill(traffic: Traffic, share: float, instance: str, window_seconds: float) -> tuple[ServingCounters, dict]:
    rate = traffic.rate * share
    prompt = traffic.prompt_tokens * _spread(instance, "prompt", 0.1)
    rho = min(rate * prompt / PREFILL_CAPACITY, 0.99)
    s = prompt / PREFILL_CAPACITY
    ttft = {p: a + b * s * rho / (1 - rho) + c * s for p, (a, b, c) in PREFILL_TTFT.items()}
    num = round(rate * window_seconds)
    counters = ServingCounters(busy_seconds=rho * window_seconds, prefill_tokens=round(num * prompt),
                               num_prefilled=num, queued_tokens=0, num_waiting=0, batch_mean=rho, kv_tokens_mean=0.0,
                               kv_capacity_tokens=KV_CAPACITY, max_batch=MAX_BATCH)
    return counters, {"ttft": _latency(ttft[90] * 0.7, num, ttft), "itl": LatencySummary()}


def _decode(traffic: Traffic, share: float, instance: str, window_seconds: float) -> tuple[ServingCounters, dict]:
    a, k = DECODE_ITL
    demand = traffic.rate * share * max(traffic.output_tokens - 1, 0.0)  # tokens/s
    batch = min(a * demand / (1 - k * demand), MAX_BATCH) if k * demand < 1 else MAX_BATCH
    itl = a + k * batch
    context = (traffic.prompt_tokens + traffic.output_tokens / 2) * _spread(instance, "context", 0.1)
    gaps = round(demand * window_seconds)
    counters = ServingCounters(busy_seconds=window_seconds, prefill_tokens=0, num_prefilled=0, queued_tokens=0,
                               num_waiting=0, batch_mean=batch, kv_tokens_mean=batch * context,
                               kv_capacity_tokens=KV_CAPACITY, max_batch=MAX_BATCH)
    return counters, {"ttft": LatencySummary(), "itl": _latency(itl, gaps, {p: itl * m for p, m in
                                                                           ITL_PERCENTILE.items()})}


def windows(deployment: str, traffic: Traffic, ready: dict[str, list[str]], *, start: float, window_seconds: float,
            ep_size: dict[str, int]) -> tuple[list[Snapshot], RouterWindow]:
    """The window [start, start + window_seconds) of every instance in `ready` (role -> instance names) and of
    the router, which sends every prompt to the prefill pool; each instance reports as its rank 0 of
    `ep_size[role]`."""
    snapshots, measured = [], {}
    for role, names in ready.items():
        weights = {name: _spread(name, "share", 0.05) for name in names}
        total = sum(weights.values())
        for name in names:
            counters, latency = (_prefill if role == "prefill" else _decode)(traffic, weights[name] / total, name,
                                                                            window_seconds)
            measured.setdefault(role, []).append(latency)
            ident = Identity(deployment=deployment, instance=name, role=role, rank=0, ep_size=ep_size[role],
                             slots_per_rank=SLOTS_PER_RANK)
            snapshots.append(Snapshot(
                identity=ident, model=MODEL, window_start=start, window_seconds=window_seconds, placement_version=0,
                serving=counters,
                num_steps=100, expert_tokens=Array.from_numpy(_zeros(MODEL.num_layers, MODEL.num_experts)),
                slot_tokens=Array.from_numpy(_zeros(MODEL.num_layers, SLOTS_PER_RANK)), **latency))
    arrivals = round(traffic.rate * window_seconds)
    ttft = _worst([m["ttft"] for m in measured.get("prefill", [])], arrivals)
    itl = _worst([m["itl"] for m in measured.get("decode", [])], round(arrivals * traffic.output_tokens))
    router = RouterWindow(deployment=deployment, router="router-0", window_start=start, window_seconds=window_seconds,
                          num_arrivals=arrivals, num_local=0, input_tokens=round(arrivals * traffic.prompt_tokens),
                          num_finished=arrivals, output_tokens=round(arrivals * traffic.output_tokens), ttft=ttft,
                          ttft_local=LatencySummary(), ttft_remote=ttft, itl=itl, local_prefill_threshold=0,
                          request_seconds=_latency(2.0, arrivals, {90: 3.0, 99: 4.0}),
                          kv_transfer=_latency(0.01, arrivals, {90: 0.02, 99: 0.03}))
    return snapshots, router


def _worst(summaries: list[LatencySummary], count: int) -> LatencySummary:
    """The deployment's percentiles as its slowest replica's (a bound: replicas differ by a few percent)."""
    if not summaries or count == 0:
        return LatencySummary()
    return LatencySummary(count=count, sum=count * max(s.p50 for s in summaries),
                          p50=max(s.p50 for s in summaries), p90=max(s.p90 for s in summaries),
                          p99=max(s.p99 for s in summaries))


def _zeros(*shape: int) -> np.ndarray:
    return np.zeros(shape, np.int64)
