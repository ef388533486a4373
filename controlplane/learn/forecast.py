"""Next-window expert load from recent windows.

history: [W, L, E] tokens per window, oldest first. Forecasts: [L, E] tokens for the next window.
"""

from __future__ import annotations

import numpy as np

DEFAULT_HALF_LIFE = 4.0  # windows; long enough to average out routing noise, short enough to follow drift


def _check_history(history) -> np.ndarray:
    history = np.asarray(history, dtype=np.float64)
    if history.ndim != 3 or 0 in history.shape:
        raise ValueError(f"history must be [num_windows, num_layers, num_experts], got shape {history.shape}")
    if not np.isfinite(history).all() or (history < 0).any():
        raise ValueError("history must be finite, non-negative token counts")
    return history


def ewma(history, half_life: float = DEFAULT_HALF_LIFE) -> np.ndarray:
    """Exponentially weighted mean over windows, newest weighted most. [W, L, E] -> [L, E]."""
    history = _check_history(history)
    if not half_life > 0:
        raise ValueError(f"half_life must be > 0 windows, got {half_life}")
    age = np.arange(history.shape[0])[::-1]
    weight = 0.5 ** (age / half_life)
    return np.tensordot(weight / weight.sum(), history, axes=1)


def forecast_load(history) -> np.ndarray:
    """Expected tokens per expert in the next window, [L, E], from history [W, L, E] oldest first."""
    return ewma(history)
