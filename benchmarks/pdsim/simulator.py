"""Trace replay of a PD-disaggregated deployment, discrete-event, driven by a pool planner.

Requests arrive from the trace and go through the router (router.py) to the replicas of the fleet
(fleet.py). At every window's end the planner sees the windows measured so far and answers pool
sizes, which the fleet applies as a deployment would (startup, drain or removal without it). After
the trace ends, in-flight work may finish for `tail_seconds`; what is still in flight then is
unserved. Times in seconds.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

import numpy as np

from benchmarks.pdsim.cost import EngineCost
from benchmarks.pdsim.events import DECODE_END, HANDOFF, PREFILL_END, READY_EVENT, WINDOW, EventQueue
from benchmarks.pdsim.fleet import Fleet
from benchmarks.pdsim.measure import WindowLog, pool_window
from benchmarks.pdsim.replicas import Replica
from benchmarks.pdsim.requests import Requests
from benchmarks.pdsim.router import SimRouter
from benchmarks.pdsim.trace import Trace
from controlplane.observed.serving import ROLES, PoolWindow
from controlplane.solve.pools.decision import PoolDecision, ThresholdDecision
from controlplane.solve.pools.planning import PoolPlanner
from controlplane.solve.pools.view import PoolsView, SloTarget


@dataclass(frozen=True)
class SimConfig:
    targets: tuple[SloTarget, ...]
    initial: dict  # role -> replicas at the start (ready and warm)
    bounds: dict = field(default_factory=lambda: {"prefill": (1, 16), "decode": (1, 16)})  # role -> (min, max)
    gpu_budget: int | None = None
    cost: EngineCost = EngineCost()
    window_seconds: float = 10.0
    local_prefill_threshold: int = 512
    drain: bool = True
    history_windows: int = 360  # windows the planner is shown
    tail_seconds: float = 600.0


@dataclass
class SimResult:
    trace: Trace
    planner: str
    config: SimConfig
    requests: Requests
    replicas: list[Replica]
    decisions: list[PoolDecision]  # applied size changes, in order
    thresholds: list[ThresholdDecision]  # applied threshold changes
    timeline: list[dict]  # one row per window: serving/ready replicas per pool, GPUs, threshold
    windows: list[PoolWindow]  # every window measured, in order
    token_gaps: np.ndarray  # [k, 3] (window end, seconds between two output tokens, tokens) over the trace


class Simulation:
    def __init__(self, trace: Trace, planner: PoolPlanner, config: SimConfig) -> None:
        self.trace, self.planner, self.config = trace, planner, config
        self.requests = Requests.of(trace)
        self.events = EventQueue()
        self.log = WindowLog()
        self.fleet = Fleet(config.cost, self.events, self.requests, config.bounds, config.drain)
        self.router = SimRouter(self.fleet, self.events, self.requests, config.cost, self.log,
                                config.local_prefill_threshold)
        self.windows: deque[PoolWindow] = deque(maxlen=config.history_windows)
        self.all_windows: list[PoolWindow] = []
        self.decisions: list[PoolDecision] = []
        self.thresholds: list[ThresholdDecision] = []
        self.timeline: list[dict] = []
        for role in ROLES:
            for _ in range(config.initial[role]):
                self.fleet.add(role, 0.0, ready_at=-1e9)

    def run(self) -> SimResult:
        arrival, n = self.requests.arrival, self.requests.arrival.size
        end = self.trace.seconds + self.config.tail_seconds
        for k in range(1, int(self.trace.seconds // self.config.window_seconds) + 1):
            self.events.push(k * self.config.window_seconds, WINDOW)
        i = 0
        while True:
            next_arrival = arrival[i] if i < n else float("inf")
            now = min(next_arrival, self.events.next_at())
            if now > end:
                break
            if next_arrival <= self.events.next_at():
                self.log.arrivals.append(i)
                self.router.arrive(i, now)
                i += 1
                continue
            _, kind, payload = self.events.pop()
            if kind == WINDOW:
                self._window(now)
            elif kind == READY_EVENT:
                if self.fleet.ready(payload[0]):
                    self.router.flush(payload[0].role, now)
            elif kind == PREFILL_END:
                self.router.prefill_end(payload[0], payload[1], now)
            elif kind == HANDOFF:
                self.router.handoff(payload[0], payload[1], now)
            elif kind == DECODE_END:
                self.router.decode_end(payload[0], payload[1], now)
        return SimResult(self.trace, self.planner.name, self.config, self.requests, self.fleet.replicas,
                         self.decisions, self.thresholds, self.timeline, self.all_windows,
                         np.concatenate(self.log.token_gaps or [np.zeros((0, 3))]))

    def _window(self, now: float) -> None:
        self.windows.append(pool_window(now, self.config.window_seconds, self.log, self.requests, self.fleet.live()))
        self.all_windows.append(self.windows[-1])
        view = PoolsView(now, tuple(self.windows), self.fleet.pools(), self.config.targets, self.router.threshold,
                         self.config.gpu_budget, tuple(self.decisions), tuple(self.thresholds))
        plan = self.planner.plan(view)
        for decision in plan.decisions:
            if decision.direction != 0:
                if self.fleet.resize(decision.role, decision.target, now):
                    self.router.flush(decision.role, now)
                self.decisions.append(decision)
        if plan.threshold is not None and plan.threshold.direction != 0:
            self.router.threshold = plan.threshold.target
            self.thresholds.append(plan.threshold)
        pools = self.fleet.pools()
        self.timeline.append({"t": now, "threshold": self.router.threshold,
                              **{f"{role}_serving": pools[role].num_serving for role in ROLES},
                              **{f"{role}_ready": pools[role].num_ready for role in ROLES},
                              "gpus": sum((p.num_serving + p.num_draining) * p.gpus_per_replica
                                          for p in pools.values())})


def simulate(trace: Trace, planner: PoolPlanner, config: SimConfig) -> SimResult:
    return Simulation(trace, planner, config).run()
