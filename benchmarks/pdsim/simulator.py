"""Trace replay of a PD-disaggregated deployment, discrete-event, driven by a pool planner.

Requests arrive from the trace; the router sends prompts up to the local-prefill threshold to the
least-loaded decode replica (prefilled there), the rest to the prefill replica with the fewest
queued tokens; after prefill the KV moves to the least-loaded decode replica, which admits it when
its KV cache has room. At every window's end the planner sees the windows measured so far and
answers pool sizes, which the simulator applies as a deployment would: new replicas become ready
after the startup time; on scale-down, starting replicas are cancelled first, then ready ones drain
(no new work, in-flight work finishes, then removed) or, with `drain=False`, are removed at once and
their in-flight requests fail (ABORTED). After the trace ends, in-flight work may finish for
`tail_seconds`; what is still in flight then is unserved. Times in seconds.
"""

from __future__ import annotations

import heapq
import itertools
from collections import deque
from dataclasses import dataclass, field

import numpy as np

from benchmarks.pdsim.cost import EngineCost
from benchmarks.pdsim.measure import WindowLog, pool_window
from benchmarks.pdsim.replicas import DRAINING, READY, REMOVED, STARTING, DecodeReplica, PrefillReplica, Replica
from benchmarks.pdsim.requests import ABORTED, Requests
from benchmarks.pdsim.trace import Trace
from controlplane.solve.pool_decision import PoolDecision, PoolPlanner, ThresholdDecision
from controlplane.solve.pool_view import ROLES, PoolSize, PoolsView, PoolWindow, SloTarget

READY_EVENT, PREFILL_END, HANDOFF, DECODE_END, WINDOW = range(5)


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
        self.trace, self.planner, self.config, self.cost = trace, planner, config, config.cost
        self.requests = Requests.of(trace)
        self.events: list = []
        self.sequence = itertools.count()
        self.replicas: list[Replica] = []
        self.names = itertools.count()
        self.backlog = {"prefill": deque(), "decode": deque()}  # requests with no replica to go to
        self.log = WindowLog()
        self.windows: deque[PoolWindow] = deque(maxlen=config.history_windows)
        self.all_windows: list[PoolWindow] = []
        self.decisions: list[PoolDecision] = []
        self.thresholds: list[ThresholdDecision] = []
        self.timeline: list[dict] = []
        self.threshold = config.local_prefill_threshold
        for role in ROLES:
            for _ in range(config.initial[role]):
                self._add(role, 0.0, ready_at=-1e9)

    # ---- events
    def _push(self, at: float, kind: int, *payload) -> None:
        heapq.heappush(self.events, (at, next(self.sequence), kind, payload))

    def run(self) -> SimResult:
        arrival, n = self.requests.arrival, self.requests.arrival.size
        end = self.trace.seconds + self.config.tail_seconds
        windows = int(self.trace.seconds // self.config.window_seconds)
        for k in range(1, windows + 1):
            self._push(k * self.config.window_seconds, WINDOW)
        i = 0
        while True:
            next_arrival = arrival[i] if i < n else float("inf")
            next_event = self.events[0][0] if self.events else float("inf")
            now = min(next_arrival, next_event)
            if now > end:
                break
            if next_arrival <= next_event:
                self.log.arrivals.append(i)
                self._route(i, now)
                i += 1
                continue
            _, _, kind, payload = heapq.heappop(self.events)
            if kind == WINDOW:
                self._window(now)
            elif kind == READY_EVENT:
                self._ready(payload[0], now)
            elif kind == PREFILL_END:
                self._prefill_end(payload[0], payload[1], now)
            elif kind == HANDOFF:
                self._handoff(payload[0], payload[1], now)
            else:
                self._decode_end(payload[0], payload[1], now)
        return SimResult(self.trace, self.planner.name, self.config, self.requests, self.replicas,
                         self.decisions, self.thresholds, self.timeline, self.all_windows,
                         np.concatenate(self.log.token_gaps or [np.zeros((0, 3))]))

    # ---- routing and work
    def _serving(self, role: str) -> list[Replica]:
        return [r for r in self.replicas if r.role == role and r.state == READY]

    def _route(self, request: int, now: float) -> None:
        is_local = self.requests.input_tokens[request] <= self.threshold
        self.requests.is_local[request] = is_local
        self._send(request, "decode" if is_local else "prefill", now)

    def _send(self, request: int, role: str, now: float) -> None:
        serving = self._serving(role)
        if not serving:
            self.backlog[role].append(request)
            return
        if role == "prefill":
            replica = min(serving, key=lambda r: r.queued_tokens + (r.is_busy and self.cost.prefill_max_batch_tokens))
            replica.enqueue(request, int(self.requests.input_tokens[request]))
            self._kick_prefill(replica, now)
        else:
            replica = min(serving, key=lambda r: r.num_in_flight)
            replica.pending.append(request)
            self._kick_decode(replica, now)
            end = replica.cut_run(now)
            if end is not None:
                self._push(end, DECODE_END, replica, replica.version)

    def _kick_prefill(self, replica: PrefillReplica, now: float) -> None:
        if replica.is_busy or not replica.queue:
            return
        seconds, done = replica.start_step(now, self.cost)
        self._push(now + seconds, PREFILL_END, replica, done)

    def _prefill_end(self, replica: PrefillReplica, done: list[int], now: float) -> None:
        if replica.state == REMOVED:
            return
        replica.is_busy = False
        for request in done:
            replica.num_prefilled += 1
            replica.num_transfers += 1
            self._push(now + self.cost.handoff(self.requests.input_tokens[request]), HANDOFF, request, replica)
        self._kick_prefill(replica, now)
        self._retire_if_drained(replica, now)

    def _handoff(self, request: int, source: PrefillReplica, now: float) -> None:
        source.num_transfers -= 1
        if source.state == REMOVED:  # removed without drain: the KV it held is gone
            self.requests.status[request] = ABORTED
            return
        self.requests.kv_ready[request] = now
        source.ttft_samples.append(now - self.requests.arrival[request])
        self._send(request, "decode", now)
        self._retire_if_drained(source, now)

    def _kick_decode(self, replica: DecodeReplica, now: float) -> None:
        if replica.is_busy:
            return
        seconds, first, finished = replica.start_step(now, self.cost, self.requests)
        self.log.first_tokens += first
        self.log.finished += finished
        if seconds is None:
            self._retire_if_drained(replica, now)
            return
        self._push(now + seconds, DECODE_END, replica, replica.version)

    def _decode_end(self, replica: DecodeReplica, version: int, now: float) -> None:
        if replica.state == REMOVED or version != replica.version:
            return
        first, finished = replica.end_step(now, self.requests)
        self.log.first_tokens += first
        self.log.finished += finished
        self._kick_decode(replica, now)

    # ---- lifecycle
    def _add(self, role: str, now: float, ready_at: float) -> Replica:
        name = f"{role[0]}{next(self.names)}"
        if role == "prefill":
            replica: Replica = PrefillReplica(name, role, now, ready_at)
        else:
            replica = DecodeReplica(name, role, now, ready_at, kv_capacity=self.cost.decode_kv_capacity_tokens,
                                    max_batch=self.cost.decode_max_batch)
        replica.state = READY if ready_at <= now else STARTING
        self.replicas.append(replica)
        if replica.state == STARTING:
            self._push(ready_at, READY_EVENT, replica)
        return replica

    def _ready(self, replica: Replica, now: float) -> None:
        if replica.state != STARTING:
            return
        replica.state = READY
        self._flush_backlog(replica.role, now)

    def _flush_backlog(self, role: str, now: float) -> None:
        waiting, self.backlog[role] = self.backlog[role], deque()
        for request in waiting:
            self._send(request, role, now)

    def _retire_if_drained(self, replica: Replica, now: float) -> None:
        if replica.state == DRAINING and replica.is_empty:
            replica.state, replica.removed_at = REMOVED, now

    def _remove_now(self, replica: Replica, now: float) -> None:
        """Removal without drain: whatever the replica holds fails, and so do KV transfers out of it."""
        if isinstance(replica, PrefillReplica):
            held = [item[0] for item in replica.queue]
            for _, _, kind, payload in self.events:
                if kind == PREFILL_END and payload[0] is replica:
                    held += payload[1]  # the step in flight: its KV never reaches decode
        else:
            held = replica.held()
        self.requests.status[held] = ABORTED
        replica.state, replica.removed_at = REMOVED, now

    def _resize(self, role: str, target: int, now: float) -> None:
        mine = [r for r in self.replicas if r.role == role]
        serving = [r for r in mine if r.state in (READY, STARTING)]
        if target > len(serving):
            need = target - len(serving)
            for replica in sorted((r for r in mine if r.state == DRAINING), key=lambda r: -r.created_at)[:need]:
                replica.state = READY  # taken back before it left: no startup needed
                need -= 1
            for _ in range(need):
                self._add(role, now, now + self.cost.startup_seconds)
            self._flush_backlog(role, now)
        elif target < len(serving):
            excess = len(serving) - target
            for replica in sorted((r for r in serving if r.state == STARTING), key=lambda r: -r.created_at)[:excess]:
                replica.state, replica.removed_at = REMOVED, now
                excess -= 1
            ready = sorted((r for r in serving if r.state == READY), key=self._in_flight)
            for replica in ready[:excess]:
                if self.config.drain:
                    replica.state = DRAINING
                    self._retire_if_drained(replica, now)
                else:
                    self._remove_now(replica, now)

    def _in_flight(self, replica: Replica) -> float:
        return replica.queued_tokens if isinstance(replica, PrefillReplica) else replica.num_in_flight

    # ---- the planner
    def _pools(self) -> dict:
        pools = {}
        for role in ROLES:
            mine = [r for r in self.replicas if r.role == role]
            low, high = self.config.bounds[role]
            pools[role] = PoolSize(sum(r.state == READY for r in mine), sum(r.state == STARTING for r in mine),
                                   sum(r.state == DRAINING for r in mine), self.cost.gpus(role), low, high)
        return pools

    def _window(self, now: float) -> None:
        live = [r for r in self.replicas if r.state != REMOVED]
        self.windows.append(pool_window(now, self.config.window_seconds, self.log, self.requests, live))
        self.all_windows.append(self.windows[-1])
        view = PoolsView(now, tuple(self.windows), self._pools(), self.config.targets, self.threshold,
                         self.config.gpu_budget, tuple(self.decisions), tuple(self.thresholds))
        plan = self.planner.plan(view)
        for decision in plan.decisions:
            if decision.direction != 0:
                self._resize(decision.role, decision.target, now)
                self.decisions.append(decision)
        if plan.threshold is not None and plan.threshold.direction != 0:
            self.threshold = plan.threshold.target
            self.thresholds.append(plan.threshold)
        pools = self._pools()
        self.timeline.append({"t": now, "threshold": self.threshold,
                              **{f"{role}_serving": pools[role].num_serving for role in ROLES},
                              **{f"{role}_ready": pools[role].num_ready for role in ROLES},
                              "gpus": sum((p.num_serving + p.num_draining) * p.gpus_per_replica
                                          for p in pools.values())})


def simulate(trace: Trace, planner: PoolPlanner, config: SimConfig) -> SimResult:
    return Simulation(trace, planner, config).run()
