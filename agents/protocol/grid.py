"""The window grid: window i covers unix time [i * seconds, (i + 1) * seconds).

Agents close their windows on it, the controller files each snapshot under the window its start falls
in, and the fleet simulator posts on it, so every rank of every instance lines up whatever its phase.
A window of a shorter length (an agent that has not yet heard the controller's) lands in the grid
window holding its start.

Every poster closes its window at the same instant, so a fleet's posts would all reach the controller at
once and queue there behind each other (at 1,024 GPUs, five 320-rank group posts). A poster sends a closed
window after a random delay within the first POST_SPREAD_WINDOWS of the next window, drawn anew for every
window; the controller reads a window only half a window after it ended (controlplane/store/window_reads.py).
"""

from __future__ import annotations


def window_start(index: int, seconds: float) -> float:
    """Unix seconds at which window `index` starts."""
    return index * seconds


def window_index(time: float, seconds: float) -> int:
    """The window holding `time` (unix seconds).

    A start made by `window_start(i, seconds)` maps back to exactly i: the boundary is compared as the
    same float product, where floor(time / seconds) can land one window early by rounding.
    """
    index = round(time / seconds)
    return index if window_start(index, seconds) <= time else index - 1


POST_SPREAD_WINDOWS = 0.1  # posts of a window are spread over this share of the next one


def post_at(window_end: float, window_seconds: float, draw: float) -> float:
    """Unix seconds at which a poster sends the window that ended at `window_end`; draw: uniform in [0, 1)."""
    return window_end + draw * POST_SPREAD_WINDOWS * window_seconds
