"""The decode replica: KV admission, continuous batching, local prefill, and what it measures.

Step times come from cost.EngineCost; lifecycle states are replicas.py's.
"""

from __future__ import annotations

import heapq
from collections import deque
from dataclasses import dataclass, field

from benchmarks.pdsim.cost import EngineCost
from benchmarks.pdsim.replicas import Replica
from benchmarks.pdsim.requests import DONE, Requests

MAX_RUN = 64  # decode steps simulated as one run at most


@dataclass
class DecodeReplica(Replica):
    """Sequences in the batch are a heap of (step at which it makes its last token, request); time in
    decode is read off a clock of summed step seconds. Steps that change nothing (same batch, no
    admission, no local prefill) are simulated as one run up to the next sequence's last token; new
    work cuts the run at the step in progress (cut_run)."""

    kv_capacity: int = 0
    max_batch: int = 0
    pending: deque = field(default_factory=deque)  # requests waiting for KV room, FCFS
    prefilling: deque = field(default_factory=deque)  # [request, prompt tokens left], local prefill
    batch: list = field(default_factory=list)  # heap of (last step, request)
    num_steps: int = 0
    clock: float = 0.0  # seconds of all steps so far
    kv_tokens: int = 0  # KV tokens the batch reads per step
    kv_reserved: int = 0  # prompt + output tokens of every admitted request
    step: tuple = ()  # (start, steps in the run, seconds, local-prefill tokens, local prefills it ends)
    version: int = 0  # of the run in progress: an end event of an older run is stale
    # window accumulators
    batch_seconds: float = 0.0  # sum of batch x step seconds
    kv_seconds: float = 0.0
    itl_steps: list = field(default_factory=list)  # (step seconds, sequences that waited for it)
    num_local: int = 0

    @property
    def num_in_flight(self) -> int:
        return len(self.batch) + len(self.pending) + len(self.prefilling)

    @property
    def is_empty(self) -> bool:
        return self.num_in_flight == 0 and not self.is_busy

    def held(self) -> list[int]:
        return list(self.pending) + [item[0] for item in self.prefilling] + [item[1] for item in self.batch]

    def _join(self, requests: Requests, joined: list[int]) -> list[int]:
        """Requests whose first token is out join the batch; one-token outputs are done already."""
        finished = []
        for r in joined:
            if requests.output_tokens[r] <= 1:
                finished.append(r)
                continue
            heapq.heappush(self.batch, (self.num_steps + int(requests.output_tokens[r]) - 1, r))
            requests.decode_seconds[r] = -self.clock
            self.kv_tokens += int(requests.input_tokens[r]) + 1
        return finished

    def start_step(self, now: float, cost: EngineCost, requests: Requests
                   ) -> tuple[float | None, list[int], list[int]]:
        """Admit what fits, batch one token per sequence plus a local-prefill chunk.
        (seconds or None when idle, requests whose first token is out, requests finished on admission)."""
        admitted = []
        while self.pending:
            r = self.pending[0]
            need = int(requests.input_tokens[r] + requests.output_tokens[r])
            if self.kv_reserved + need > self.kv_capacity or self.num_in_flight - len(self.pending) >= self.max_batch:
                break
            self.pending.popleft()
            self.kv_reserved += need
            if requests.is_local[r]:
                self.prefilling.append([r, int(requests.input_tokens[r])])
            else:
                requests.first_token[r] = now  # the prefill pool's token, released once decode holds the KV
                admitted.append(r)
        finished = self._join(requests, admitted)
        for r in finished:
            self.release(requests, r, now)
        chunk, budget, done_local = 0, cost.decode_max_prefill_tokens, []
        for item in self.prefilling:
            take = min(item[1], budget - chunk)
            item[1] -= take
            chunk += take
            if item[1] == 0:
                done_local.append(item[0])
            if chunk >= budget:
                break
        size = len(self.batch)
        if size == 0 and chunk == 0:
            self.is_busy = False
            return None, admitted, finished
        # a run of steps nothing changes in: up to the next sequence's last token, one step with a prefill
        num_steps = 1 if chunk or not size else min(self.batch[0][0] - self.num_steps, MAX_RUN)
        seconds = cost.decode_steps(size, self.kv_tokens, num_steps, chunk, self.is_warm(now, cost))
        self.step = (now, num_steps, seconds, chunk, done_local)
        self.version += 1
        self.is_busy = True
        return seconds, admitted, finished

    def cut_run(self, now: float) -> float | None:
        """New work arrived during a run of steps: end the run with the step in progress (so the work is
        admitted at the next step boundary, as one step at a time would). The new end, or None."""
        started, num_steps, seconds, chunk, done_local = self.step
        if not self.is_busy or num_steps == 1:
            return None
        per_step = seconds / num_steps
        done = min(num_steps, int((now - started) / per_step) + 1)
        if done == num_steps:
            return None
        self.step = (started, done, done * per_step, chunk, done_local)
        self.version += 1
        return started + done * per_step

    def end_step(self, now: float, requests: Requests) -> tuple[list[int], list[int]]:
        """A token for every sequence per step of the run; local prefills that ended join.
        (requests whose first token is out, requests finished)."""
        _, num_steps, seconds, chunk, done_local = self.step
        size = len(self.batch)
        self.busy_seconds += seconds
        self.prefill_tokens += chunk
        self.batch_seconds += size * seconds
        self.kv_seconds += (self.kv_tokens + size * (num_steps - 1) / 2) * seconds
        if size:
            self.itl_steps.append((seconds / num_steps, size * num_steps))
        self.num_steps += num_steps
        self.window_steps += num_steps
        self.clock += seconds
        self.kv_tokens += size * num_steps
        finished = []
        while self.batch and self.batch[0][0] <= self.num_steps:
            r = heapq.heappop(self.batch)[1]
            requests.decode_seconds[r] += self.clock
            self.kv_tokens -= int(requests.input_tokens[r] + requests.output_tokens[r])
            finished.append(r)
        self.num_local += len(done_local)
        for r in done_local:
            self.prefilling.popleft()
            requests.first_token[r] = requests.kv_ready[r] = now
        finished += self._join(requests, done_local)
        for r in finished:
            self.release(requests, r, now)
        self.is_busy = False
        return done_local, finished

    def release(self, requests: Requests, r: int, now: float) -> None:
        self.kv_reserved -= int(requests.input_tokens[r] + requests.output_tokens[r])
        requests.finish[r] = now
        requests.status[r] = DONE
