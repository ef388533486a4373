"""A replica's lifecycle, and the prefill replica: its prompt queue, chunked batching and window.

A replica is `starting` (holds GPUs, serves nothing) until `ready_at`, then `ready`; `draining` takes
no new work and is removed once its in-flight work is done. Step times come from cost.EngineCost; the
decode replica is in decode_replica.py.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from benchmarks.pdsim.cost import EngineCost

STARTING, READY, DRAINING, REMOVED = "starting", "ready", "draining", "removed"


@dataclass
class Replica:
    name: str
    role: str
    created_at: float
    ready_at: float
    state: str = STARTING
    removed_at: float | None = None
    is_busy: bool = False
    # window accumulators, reset by measure.py
    busy_seconds: float = 0.0
    prefill_tokens: float = 0.0
    window_steps: int = 0

    def is_warm(self, now: float, cost: EngineCost) -> bool:
        return now >= self.ready_at + cost.warmup_seconds

    @property
    def is_empty(self) -> bool:
        raise NotImplementedError

    def retire_if_drained(self, now: float) -> None:
        """A draining replica leaves once nothing is in flight on it."""
        if self.state == DRAINING and self.is_empty:
            self.state, self.removed_at = REMOVED, now


@dataclass
class PrefillReplica(Replica):
    queue: deque = field(default_factory=deque)  # [request, prompt tokens left]
    queued_tokens: float = 0.0
    num_transfers: int = 0  # KV hand-offs to decode still in flight
    num_prefilled: int = 0
    ttft_samples: list = field(default_factory=list)  # arrival -> KV ready, seconds

    def enqueue(self, request: int, num_tokens: int) -> None:
        self.queue.append([request, num_tokens])
        self.queued_tokens += num_tokens

    @property
    def is_empty(self) -> bool:
        return not self.queue and not self.is_busy and self.num_transfers == 0

    def start_step(self, now: float, cost: EngineCost) -> tuple[float, list[int]]:
        """Batch queued prompt tokens FCFS up to the chunk budget. (seconds, requests whose prefill ends)."""
        budget, taken, done = cost.prefill_max_batch_tokens, 0, []
        while self.queue and taken < budget:
            head = self.queue[0]
            take = min(head[1], budget - taken)
            head[1] -= take
            taken += take
            if head[1] == 0:
                done.append(self.queue.popleft()[0])
        self.queued_tokens -= taken
        seconds = cost.prefill_step(taken, self.is_warm(now, cost))
        self.busy_seconds += seconds
        self.prefill_tokens += taken
        self.window_steps += 1
        self.is_busy = True
        return seconds, done
