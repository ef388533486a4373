"""The replicas of both pools and their lifecycle, as a deployment controller applies pool sizes.

New replicas become ready after the startup time. On scale-down, starting replicas are cancelled
first, then the ready ones with the least in flight drain (no new work, in-flight work finishes, then
removed) or, with `drain=False`, are removed at once and what they held fails (ABORTED): the
requests queued or batched there and the prefill step in flight, whose KV never reaches decode.
A draining replica asked back before it left serves again at once. Times in seconds.
"""

from __future__ import annotations

import itertools

from benchmarks.pdsim.cost import EngineCost
from benchmarks.pdsim.decode_replica import DecodeReplica
from benchmarks.pdsim.events import PREFILL_END, READY_EVENT, EventQueue
from benchmarks.pdsim.replicas import DRAINING, READY, REMOVED, STARTING, PrefillReplica, Replica
from benchmarks.pdsim.requests import ABORTED, Requests
from controlplane.observed.serving import ROLES
from controlplane.solve.pools.view import PoolSize


class Fleet:
    def __init__(self, cost: EngineCost, events: EventQueue, requests: Requests, bounds: dict, drain: bool) -> None:
        self.cost, self.events, self.requests, self.bounds, self.drain = cost, events, requests, bounds, drain
        self.replicas: list[Replica] = []
        self._names = itertools.count()

    def serving(self, role: str) -> list[Replica]:
        """The replicas new work may go to: ready ones."""
        return [r for r in self.replicas if r.role == role and r.state == READY]

    def live(self) -> list[Replica]:
        return [r for r in self.replicas if r.state != REMOVED]

    def add(self, role: str, now: float, ready_at: float) -> Replica:
        name = f"{role[0]}{next(self._names)}"
        if role == "prefill":
            replica: Replica = PrefillReplica(name, role, now, ready_at)
        else:
            replica = DecodeReplica(name, role, now, ready_at, kv_capacity=self.cost.decode_kv_capacity_tokens,
                                    max_batch=self.cost.decode_max_batch)
        replica.state = READY if ready_at <= now else STARTING
        self.replicas.append(replica)
        if replica.state == STARTING:
            self.events.push(ready_at, READY_EVENT, replica)
        return replica

    def ready(self, replica: Replica) -> bool:
        """Its startup is over: it serves. False when it was cancelled meanwhile."""
        if replica.state != STARTING:
            return False
        replica.state = READY
        return True

    def resize(self, role: str, target: int, now: float) -> bool:
        """Ready + starting replicas of `role` to `target`. True when replicas were taken back or added."""
        mine = [r for r in self.replicas if r.role == role]
        serving = [r for r in mine if r.state in (READY, STARTING)]
        if target > len(serving):
            need = target - len(serving)
            for replica in sorted((r for r in mine if r.state == DRAINING), key=lambda r: -r.created_at)[:need]:
                replica.state = READY  # taken back before it left: no startup needed
                need -= 1
            for _ in range(need):
                self.add(role, now, now + self.cost.startup_seconds)
            return True
        excess = len(serving) - target
        for replica in sorted((r for r in serving if r.state == STARTING), key=lambda r: -r.created_at)[:excess]:
            replica.state, replica.removed_at = REMOVED, now
            excess -= 1
        ready = sorted((r for r in serving if r.state == READY), key=self._in_flight)
        for replica in ready[:max(excess, 0)]:
            if self.drain:
                replica.state = DRAINING
                replica.retire_if_drained(now)
            else:
                self._remove_now(replica, now)
        return False

    def _remove_now(self, replica: Replica, now: float) -> None:
        """Removal without drain: whatever the replica holds fails, and so do KV transfers out of it."""
        if isinstance(replica, PrefillReplica):
            held = [item[0] for item in replica.queue]
            for payload in self.events.pending(PREFILL_END):
                if payload[0] is replica:
                    held += payload[1]  # the step in flight: its KV never reaches decode
        else:
            held = replica.held()
        self.requests.status[held] = ABORTED
        replica.state, replica.removed_at = REMOVED, now

    @staticmethod
    def _in_flight(replica: Replica) -> float:
        return replica.queued_tokens if isinstance(replica, PrefillReplica) else replica.num_in_flight

    def pools(self) -> dict:
        """role -> PoolSize as the planner sees it."""
        pools = {}
        for role in ROLES:
            mine = [r for r in self.replicas if r.role == role]
            low, high = self.bounds[role]
            pools[role] = PoolSize(sum(r.state == READY for r in mine), sum(r.state == STARTING for r in mine),
                                   sum(r.state == DRAINING for r in mine), self.cost.gpus(role), low, high)
        return pools
