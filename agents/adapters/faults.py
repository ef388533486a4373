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

    def record(self, cause: str, exc: BaseException | str) -> None:
        with self.lock:
            self.counts[cause] = self.counts.get(cause, 0) + 1
            is_first = self.counts[cause] == 1
        if is_first:
            self.log.error("%s: %s (logged once; counted from now on)", cause, exc)

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
