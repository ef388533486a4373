"""When the controller reads a window: once it ended half a window ago (late ranks have had time to post it).

Agents close their windows on the grid (agents/protocol/grid.py) and post them within the next window's first
tenth (`post_at`), so every window's end brings a burst of posts. The loop passes on its own grid a little past the
moment each window becomes readable. So a pass reads a window as soon as it is complete, and does not take the
interpreter and the cores from the burst (docs/decisions/2026-12-04-passes-off-the-post-burst.md).
"""

from __future__ import annotations

from agents.protocol.grid import window_index

READ_DELAY_WINDOWS = 0.5  # a window is read this many windows after it ended
PASS_MARGIN_WINDOWS = 0.1  # the loop's passes come this much later still: never on the boundary itself


def first_unread_index(now: float, window_seconds: float) -> int:
    """Windows with a lower index are complete at unix time `now`."""
    return window_index(now - window_seconds * READ_DELAY_WINDOWS, window_seconds)


def next_pass_delay(now: float, interval_seconds: float, window_seconds: float) -> float:
    """Seconds from unix time `now` to the loop's next pass: the next point of its grid (every interval, at
    READ_DELAY_WINDOWS + PASS_MARGIN_WINDOWS past a window's end), at most one interval away. A loop whose
    passes are shorter than the interval settles on the grid after its first pass."""
    phase = window_seconds * (READ_DELAY_WINDOWS + PASS_MARGIN_WINDOWS)
    return (phase - now) % interval_seconds or interval_seconds
