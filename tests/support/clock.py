"""The one test clock: time the test moves by hand (`clock.now += 10`), called as the code's clock."""

from __future__ import annotations


class Clock:
    def __init__(self, now: float = 1_800_000_000.0):
        self.now = now

    def __call__(self) -> float:
        return self.now
