"""Pre-deployment profiling of the simulator's replicas, the data Dynamo's planner interpolates.

As Dynamo's profiler does on real engines: prefill, one request at a time per prompt length: TTFT and
prompt tokens/s per GPU; decode, a batch of `n` sequences of one context length, for a sweep of KV
usage and context lengths: ITL and output tokens/s per GPU. The replicas measured are the
simulator's own (replicas.py), alone and warm, so the profile is what an isolated engine does.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from benchmarks.pdsim.cost import EngineCost
from benchmarks.pdsim.decode_replica import DecodeReplica
from benchmarks.pdsim.replicas import PrefillReplica
from benchmarks.pdsim.requests import Requests

PREFILL_POINTS = 16  # Dynamo's interpolation granularity: 16 prefill points, 6 decode context lengths
DECODE_CONTEXTS = 6
DECODE_USAGES = 10


@dataclass(frozen=True)
class Profile:
    prefill_isl: np.ndarray  # [P] prompt tokens
    prefill_ttft: np.ndarray  # [P] seconds
    prefill_thpt_per_gpu: np.ndarray  # [P] prompt tokens/s/GPU
    x_kv_usage: np.ndarray  # [Q] share of KV capacity in use
    y_context_length: np.ndarray  # [Q] tokens
    z_itl: np.ndarray  # [Q] seconds
    z_thpt_per_gpu: np.ndarray  # [Q] output tokens/s/GPU
    max_kv_tokens: int


def _prefill_ttft(cost: EngineCost, isl: int) -> float:
    replica = PrefillReplica("profile", "prefill", 0.0, -1e9)
    replica.enqueue(0, isl)
    seconds = 0.0
    while replica.queue:
        step, _ = replica.start_step(seconds, cost)
        seconds += step
        replica.is_busy = False
    return seconds + cost.handoff(isl)


def _decode_itl(cost: EngineCost, batch: int, context: int) -> float:
    requests = Requests(np.zeros(batch), np.full(batch, context, np.int64), np.full(batch, 1_000_000, np.int64))
    replica = DecodeReplica("profile", "decode", 0.0, -1e9, kv_capacity=10**12, max_batch=batch)
    replica.pending.extend(range(batch))
    replica.start_step(0.0, cost, requests)
    replica.end_step(0.0, requests)
    seconds, _, _ = replica.start_step(0.0, cost, requests)  # the steady step, batch full
    return seconds / replica.step[1]


def profile(cost: EngineCost, max_isl: int = 16384, max_context: int = 8192) -> Profile:
    """Prompt lengths 64..max_isl (geometric), decode contexts 256..max_context (even steps)."""
    isl = np.unique(np.geomspace(64, max_isl, PREFILL_POINTS).astype(np.int64))
    ttft = np.array([_prefill_ttft(cost, int(n)) for n in isl])
    usage, context, itl, thpt = [], [], [], []
    for ctx in np.linspace(256, max_context, DECODE_CONTEXTS).astype(np.int64):
        batches = {int(min(cost.decode_max_batch, max(1, share * cost.decode_kv_capacity_tokens // ctx)))
                   for share in np.linspace(0.05, 1.0, DECODE_USAGES)}  # the batch limit may cap several
        for batch in sorted(batches):
            seconds = _decode_itl(cost, batch, int(ctx))
            usage.append(batch * ctx / cost.decode_kv_capacity_tokens)
            context.append(ctx)
            itl.append(seconds)
            thpt.append(batch / seconds / cost.decode_gpus)
    return Profile(isl.astype(np.float64), ttft, isl / ttft / cost.prefill_gpus, np.array(usage), np.array(context),
                   np.array(itl), np.array(thpt), cost.decode_kv_capacity_tokens)
