"""Failures of ours inside an engine's step or a sidecar's loop, counted by cause and logged once per cause.

A plugin runs in the step that moves an engine's expert weights: whatever goes wrong on our side (a full disk, a
torn file, a placement that does not fit) must leave the engine's own answer in place and must not flood its log
at every rearrange. The counts ride out with the load records (state_dir.py) and the sidecar's snapshots, so the
controller can say why a group is not following its placements.
"""

from __future__ import annotations

import logging
import threading


class Faults:
    """cause -> how many times it happened; the first of each cause logged with its exception, later ones not."""

    def __init__(self, log: logging.Logger):
        self.log = log
        self.lock = threading.Lock()
        self.counts: dict[str, int] = {}
        self.reported: dict[str, int] = {}  # the counts as the last snapshot carried them

    def record(self, cause: str, exc: BaseException | str, times: int = 1) -> None:
        cause = cause[:160]
        with self.lock:
            self.counts[cause] = self.counts.get(cause, 0) + times
            is_first = self.counts[cause] == times
        if is_first:
            self.log.error("%s: %s (logged once; counted from now on)", cause, exc)

    def take_new(self) -> dict[str, int]:
        """cause -> how many since the last take_new: what the next posted window carries (adapter_faults)."""
        with self.lock:
            new = {c: n - self.reported.get(c, 0) for c, n in self.counts.items() if n > self.reported.get(c, 0)}
            self.reported = dict(self.counts)
            return new

    def add_plugin_counts(self, seen: dict[str, int], counts: object, where: str = "plugin") -> dict[str, int]:
        """The cumulative counts of a part of ours inside the engine (a load record's `faults`: the policy's, one
        engine life; where="endpoint": the routes' in the API server) recorded as ours under '<where>: <cause>',
        past what `seen` held; returns the counts to remember as seen."""
        if not isinstance(counts, dict):
            return seen
        for cause, count in counts.items():
            if isinstance(count, int) and count > seen.get(cause, 0):
                self.record(f"{where}: {cause}", "inside the engine (see the engine's log)", count - seen.get(cause, 0))
        return {c: n for c, n in counts.items() if isinstance(n, int)}

    def snapshot(self) -> dict[str, int]:
        with self.lock:
            return dict(self.counts)

    @property
    def total(self) -> int:
        with self.lock:
            return sum(self.counts.values())

    def last_causes(self) -> str:
        """'cause x n, ...' for an operator's eyes ('' when none)."""
        return ", ".join(f"{cause} x{n}" for cause, n in sorted(self.snapshot().items()))
