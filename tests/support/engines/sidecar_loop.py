"""What the adapters' closed-loop and sidecar tests drive by hand: a restart that only counts, and one window of
a sidecar closed on the grid with its post awaited."""

from __future__ import annotations

import time

from agents.protocol.grid import window_index, window_start


class Restarts:
    """A restart that succeeds and counts its calls."""

    def __init__(self):
        self.num_calls = 0

    def restart(self) -> bool:
        self.num_calls += 1
        return True


def close_next_window(sidecar, poster, window_seconds: float, deadline: float):
    """Waits for the grid's next boundary, closes the window that ends there, waits (until `deadline`) for the
    poster to post it; returns the sidecar's snapshot of that window."""
    index = window_index(time.time(), window_seconds)
    time.sleep(max(0.0, window_start(index + 1, window_seconds) - time.time()))
    snapshot = sidecar.close_window(window_start(index, window_seconds))
    posted = poster.num_posted
    while poster.num_posted == posted and time.time() < deadline:
        time.sleep(0.05)
    return snapshot
