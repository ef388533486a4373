"""The simulator's clock: a heap of timed events, in time order, ties in the order they were pushed.

An event is (seconds, sequence, kind, payload); `kind` is one of the constants below and the payload
is what its handler needs (a replica, a request, a step's requests).
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Iterator

READY_EVENT, PREFILL_END, HANDOFF, DECODE_END, WINDOW = range(5)


class EventQueue:
    def __init__(self) -> None:
        self._heap: list = []
        self._sequence = itertools.count()

    def push(self, at: float, kind: int, *payload) -> None:
        heapq.heappush(self._heap, (at, next(self._sequence), kind, payload))

    def next_at(self) -> float:
        """Seconds of the earliest event (inf when none is left)."""
        return self._heap[0][0] if self._heap else float("inf")

    def pop(self) -> tuple[float, int, tuple]:
        """(seconds, kind, payload) of the earliest event, removed."""
        at, _, kind, payload = heapq.heappop(self._heap)
        return at, kind, payload

    def pending(self, kind: int) -> Iterator[tuple]:
        """Payloads of the events of `kind` not yet handled, in no particular order."""
        return (payload for _, _, k, payload in self._heap if k == kind)
