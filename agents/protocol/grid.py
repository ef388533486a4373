"""The window grid: window i covers unix time [i * seconds, (i + 1) * seconds).

Agents close their windows on it, the controller files each snapshot under the window its start falls
in, and the fleet simulator posts on it, so every rank of every instance lines up whatever its phase.
A window of a shorter length (an agent that has not yet heard the controller's) lands in the grid
window holding its start.
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
