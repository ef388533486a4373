"""Pool-planner fixtures: windows as the agents would report them, a latency model with known
coefficients (the learner's own classes), and a planner that follows a script (for the simulator)."""

from __future__ import annotations

from dataclasses import dataclass

from agents.protocol import LatencySummary
from controlplane.learn.latency import DecodeLatency, PoolLatency, PrefillLatency
from controlplane.observed.serving import ROLES, PoolWindow, ReplicaWindow
from controlplane.solve.pools.decision import DecisionKind, PoolDecision
from controlplane.solve.pools.planning import PoolDecisions
from controlplane.solve.pools.view import PoolSize, PoolsView, SloTarget

TARGETS = (SloTarget("ttft", 90, 1.0), SloTarget("ttft", 99, 2.0), SloTarget("itl", 90, 0.05),
           SloTarget("itl", 99, 0.08))
WINDOW = 10.0


def latency(p90: float, p99: float | None = None, count: int = 200) -> LatencySummary:
    p99 = p90 * 1.5 if p99 is None else p99
    return LatencySummary(count=count, sum=count * p90 * 0.6, p50=p90 * 0.6, p90=p90, p99=p99)


def model(capacity: float = 8000.0, kv_capacity: float = 160_000, max_batch: int = 96) -> PoolLatency:
    """Prefill: TTFT_q = a + b * s * rho/(1-rho) + c * s; decode: ITL = 12 ms + 0.7 ms per sequence."""
    prefill = PrefillLatency(capacity, {90: (0.05, 1.0, 1.5), 99: (0.1, 2.0, 3.0)}, 100)
    decode = DecodeLatency({"mean": (0.012, 0.0007, 0.0, 0.0), 90: (0.013, 0.0007, 0.0, 0.0),
                            99: (0.015, 0.0008, 0.0, 0.0)}, 100)
    return PoolLatency(prefill, decode, kv_capacity, max_batch)


def window(end: float, rate: float = 10.0, *, ttft: float = 0.4, itl: float = 0.03, num_prefill: int = 2,
           num_decode: int = 3, local_share: float = 0.2, prompt: float = 1200.0, output: float = 200.0,
           waiting: int = 0, **overrides) -> PoolWindow:
    """A healthy window carrying `rate` requests/s, with its replicas' windows."""
    arrivals = int(rate * WINDOW)
    remote = arrivals * (1 - local_share)
    replicas = tuple(
        ReplicaWindow(f"p{i}", "prefill", 100, busy_seconds=3.0, num_steps=20,
                      prefill_tokens=remote * prompt / num_prefill, num_prefilled=int(remote / num_prefill),
                      ttft=latency(ttft)) for i in range(num_prefill)) + tuple(
        ReplicaWindow(f"d{i}", "decode", 100, busy_seconds=9.0, num_steps=300,
                      prefill_tokens=arrivals * local_share * 300 / num_decode,
                      num_prefilled=int(arrivals * local_share / num_decode), num_waiting=waiting, batch=20.0,
                      kv_tokens=20 * 1300.0, kv_capacity_tokens=160_000, max_batch=96, itl=latency(itl))
        for i in range(num_decode))
    fields = dict(end=end, seconds=WINDOW, num_arrivals=arrivals, mean_input_tokens=prompt,
                  mean_output_tokens=output, local_prefill_share=local_share, ttft=latency(ttft), itl=latency(itl),
                  ttft_local=latency(ttft / 4), ttft_remote=latency(ttft), request_seconds=latency(5.0),
                  replicas=replicas)
    return PoolWindow(**(fields | overrides))


def view(windows: list[PoolWindow], *, prefill: int = 2, decode: int = 3, history=(), threshold: int = 512,
         budget: int | None = None, starting: dict | None = None, now: float | None = None) -> PoolsView:
    starting = starting or {}
    pools = {"prefill": PoolSize(prefill, starting.get("prefill", 0), 0, 1, 1, 16),
             "decode": PoolSize(decode, starting.get("decode", 0), 0, 2, 1, 16)}
    return PoolsView(windows[-1].end if now is None else now, tuple(windows), pools, TARGETS, threshold, budget,
                     tuple(history))


@dataclass
class Scripted:
    """A pool planner that sets the sizes a script gives for each time: [(from seconds, {role: replicas})]."""

    script: list
    name: str = "scripted"

    def plan(self, view: PoolsView) -> PoolDecisions:
        sizes = [s for at, s in self.script if at <= view.now][-1]
        return PoolDecisions(view.now, tuple(PoolDecision(view.now, role, view.pools[role].num_serving, sizes[role],
                                                     DecisionKind.predictive, "scripted") for role in ROLES))
