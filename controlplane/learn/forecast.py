"""Next-window expert load from recent windows.

history: [W, L, E] tokens per window, oldest first. Forecasts: [L, E] tokens for the next window.
"""

from __future__ import annotations

import numpy as np
from sklearn.linear_model import Ridge

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


def ridge(history, num_lags: int = 4) -> np.ndarray:
    """Linear model on each expert's last `num_lags` windows, fitted over all (layer, expert) series.

    Captures trend (rising or cooling experts) that a mean lags behind. [W, L, E] -> [L, E], >= 0.
    """
    history = _check_history(history)
    num_windows = history.shape[0]
    if num_windows <= num_lags:
        return ewma(history)
    series = history.reshape(num_windows, -1)
    # rows: (target window t, series); features: the num_lags windows before t
    lagged = [series[t - num_lags:t].T for t in range(num_lags, num_windows)]
    features = np.stack(lagged).reshape(-1, num_lags)
    targets = series[num_lags:].reshape(-1)
    model = Ridge(alpha=1.0).fit(features, targets)
    return np.maximum(model.predict(series[-num_lags:].T), 0.0).reshape(history.shape[1:])


CANDIDATES = {
    "last": lambda h: _check_history(h)[-1],
    "ewma1": lambda h: ewma(h, 1.0),
    "ewma4": lambda h: ewma(h, 4.0),
    "ewma16": lambda h: ewma(h, 16.0),
    "ridge": ridge,
}


def backtest_errors(history, num_folds: int = 4) -> dict[str, float]:
    """Mean absolute one-window-ahead error (tokens) of each candidate on the last windows."""
    history = _check_history(history)
    num_folds = min(num_folds, history.shape[0] - 1)
    errors = {name: 0.0 for name in CANDIDATES}
    for end in range(history.shape[0] - num_folds, history.shape[0]):
        for name, forecast in CANDIDATES.items():
            errors[name] += float(np.abs(forecast(history[:end]) - history[end]).mean()) / num_folds
    return errors


def forecast_load(history) -> np.ndarray:
    """Expected tokens per expert in the next window, [L, E], from history [W, L, E] oldest first.

    Uses the candidate with the lowest backtest error on this history (EWMA when history is short).
    """
    history = _check_history(history)
    if history.shape[0] < 3:
        return ewma(history)
    errors = backtest_errors(history)
    return CANDIDATES[min(errors, key=errors.get)](history)
