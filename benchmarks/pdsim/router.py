"""The simulated router and the work it sets moving: it binds each request to a replica on arrival.

Prompts up to the local-prefill threshold go to the decode replica with the fewest requests in
flight (prefilled there), the rest to the prefill replica with the fewest queued prompt tokens (a busy
one counts one chunk more); after prefill the KV moves to the decode replica with the fewest in
flight, which admits it when its KV cache has room. A request waits on the replica it was sent to:
queued work is never moved to a replica that frees up or starts later, as agents/router/ does (it
forwards each request to a worker at once; the worker queues it). Only while a pool has no ready
replica at all do requests wait at the router, and go out when one is ready. Times in seconds.
"""

from __future__ import annotations

from collections import deque

from benchmarks.pdsim.cost import EngineCost
from benchmarks.pdsim.decode_replica import DecodeReplica
from benchmarks.pdsim.events import DECODE_END, HANDOFF, PREFILL_END, EventQueue
from benchmarks.pdsim.fleet import Fleet
from benchmarks.pdsim.measure import WindowLog
from benchmarks.pdsim.replicas import REMOVED, PrefillReplica
from benchmarks.pdsim.requests import ABORTED, Requests


class SimRouter:
    def __init__(self, fleet: Fleet, events: EventQueue, requests: Requests, cost: EngineCost, log: WindowLog,
                 threshold: int) -> None:
        self.fleet, self.events, self.requests, self.cost, self.log = fleet, events, requests, cost, log
        self.threshold = threshold
        self.backlog = {"prefill": deque(), "decode": deque()}  # requests with no replica to go to

    def arrive(self, request: int, now: float) -> None:
        is_local = self.requests.input_tokens[request] <= self.threshold
        self.requests.is_local[request] = is_local
        self.send(request, "decode" if is_local else "prefill", now)

    def send(self, request: int, role: str, now: float) -> None:
        serving = self.fleet.serving(role)
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
                self.events.push(end, DECODE_END, replica, replica.version)

    def flush(self, role: str, now: float) -> None:
        """Requests that waited for a ready replica of `role` go out."""
        waiting, self.backlog[role] = self.backlog[role], deque()
        for request in waiting:
            self.send(request, role, now)

    def _kick_prefill(self, replica: PrefillReplica, now: float) -> None:
        if replica.is_busy or not replica.queue:
            return
        seconds, done = replica.start_step(now, self.cost)
        self.events.push(now + seconds, PREFILL_END, replica, done)

    def prefill_end(self, replica: PrefillReplica, done: list[int], now: float) -> None:
        if replica.state == REMOVED:
            return
        replica.is_busy = False
        for request in done:
            replica.num_prefilled += 1
            replica.num_transfers += 1
            self.events.push(now + self.cost.handoff(self.requests.input_tokens[request]), HANDOFF, request, replica)
        self._kick_prefill(replica, now)
        replica.retire_if_drained(now)

    def handoff(self, request: int, source: PrefillReplica, now: float) -> None:
        source.num_transfers -= 1
        if source.state == REMOVED:  # removed without drain: the KV it held is gone
            self.requests.status[request] = ABORTED
            return
        self.requests.kv_ready[request] = now
        source.ttft_samples.append(now - self.requests.arrival[request])
        self.send(request, "decode", now)
        source.retire_if_drained(now)

    def _kick_decode(self, replica: DecodeReplica, now: float) -> None:
        if replica.is_busy:
            return
        seconds, first, finished = replica.start_step(now, self.cost, self.requests)
        self.log.first_tokens += first
        self.log.finished += finished
        if seconds is None:
            replica.retire_if_drained(now)
            return
        self.events.push(now + seconds, DECODE_END, replica, replica.version)

    def decode_end(self, replica: DecodeReplica, version: int, now: float) -> None:
        if replica.state == REMOVED or version != replica.version:
            return
        first, finished = replica.end_step(now, self.requests)
        self.log.first_tokens += first
        self.log.finished += finished
        self._kick_decode(replica, now)
