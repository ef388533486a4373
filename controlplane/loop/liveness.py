"""The reconcile loop's liveness, as `/healthz` reports it: written by the loop's thread, read by the API.

Liveness is about the loop, not the database. A loop that keeps passing is alive even while every pass
fails because the database is gone (restarting the process would not bring the database back; `/readyz`
says whether it answers). The loop is stalled when its next pass is overdue by more than
`max_delay_seconds`, a hung pass, or when its thread has ended.

Failed passes back off: the wait before the next doubles from the reconcile interval up to
`max_backoff_seconds`, and the first pass that works resets it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from controlplane.config import Settings


@dataclass
class LoopLiveness:
    """Times are `clock()` seconds (monotonic)."""

    interval_seconds: float
    max_backoff_seconds: float
    max_delay_seconds: float
    clock: Callable[[], float] = time.monotonic
    num_passes: int = 0
    consecutive_failures: int = 0
    last_pass_at: float | None = None
    last_success_at: float | None = None
    is_stopped: bool = False
    next_due: float = field(init=False)
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @classmethod
    def for_settings(cls, settings: Settings) -> LoopLiveness:
        # a pass may also wait for the database a few times (a connection, a lock) before it fails
        return cls(settings.reconcile_seconds, settings.max_reconcile_backoff_seconds,
                   settings.max_loop_delay_intervals * settings.reconcile_seconds + 3 * settings.db_timeout_seconds)

    def __post_init__(self) -> None:
        self.next_due = self.clock()  # the first pass is due now

    def passed(self, *, is_ok: bool) -> float:
        """Records a pass that ended; returns how long to wait before the next one."""
        with self.lock:
            now = self.clock()
            self.num_passes += 1
            self.last_pass_at = now
            if is_ok:
                self.consecutive_failures, self.last_success_at = 0, now
                wait = self.interval_seconds
            else:
                self.consecutive_failures += 1
                wait = min(self.max_backoff_seconds, self.interval_seconds * 2 ** (self.consecutive_failures - 1))
            self.next_due = now + wait
            return wait

    def stopped(self) -> None:
        with self.lock:
            self.is_stopped = True

    def report(self) -> tuple[bool, dict]:
        """(is the loop alive, what /healthz shows of it)."""
        with self.lock:
            now = self.clock()
            overdue = now - self.next_due
            is_alive = not self.is_stopped and overdue <= self.max_delay_seconds
            since = {name: None if at is None else round(now - at, 3)
                     for name, at in (("last_pass_seconds_ago", self.last_pass_at),
                                      ("last_success_seconds_ago", self.last_success_at))}
            return is_alive, {"status": "stopped" if self.is_stopped else ("passing" if is_alive else "stalled"),
                              "passes": self.num_passes, "consecutive_failures": self.consecutive_failures,
                              "overdue_seconds": round(max(0.0, overdue), 3), **since}
