"""Next windows of a load from recent windows, by the candidate with the lowest backtest error.

history: [W, L, E] tokens per window, oldest first (expert load). `forecast_load` gives [L, E] for the
next window; `forecast_ahead` gives the mean over the next `horizon` windows (what a change in force for that
long meets). `forecast_series` does the same for one scalar series [W] (request rate, mean prompt
length, ...) `horizon` windows ahead. Each candidate forecasts one window, then again on its own
forecast appended, and the choice is by the mean error over the horizon.
"""

from __future__ import annotations

from typing import NamedTuple

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


def ridge(history, num_lags: int = 4, min_rows: int = 20) -> np.ndarray:
    """Linear model on each expert's last `num_lags` windows, fitted over all (layer, expert) series.

    Captures trend (rising or cooling experts) that a mean lags behind. [W, L, E] -> [L, E], >= 0.
    With fewer than `min_rows` (window, series) examples to fit on it is EWMA: a handful of points
    reads a step as a slope.
    """
    history = _check_history(history)
    num_windows = history.shape[0]
    if (num_windows - num_lags) * history[0].size < min_rows:
        return ewma(history)
    series = history.reshape(num_windows, -1)
    # rows: (target window t, series); features: the num_lags windows before t
    lagged = [series[t - num_lags:t].T for t in range(num_lags, num_windows)]
    features = np.stack(lagged).reshape(-1, num_lags)
    targets = series[num_lags:].reshape(-1)
    weights, intercept = _ridge_fit(features, targets, alpha=1.0)
    return np.maximum(series[-num_lags:].T @ weights + intercept, 0.0).reshape(history.shape[1:])


def _ridge_fit(features: np.ndarray, targets: np.ndarray, alpha: float) -> tuple[np.ndarray, float]:
    """sklearn's Ridge(alpha).fit in closed form (centred, intercept unpenalised): the series forecast
    refits it for every step of every backtest fold, where sklearn's per-call checks cost 50x the solve."""
    mean_x, mean_y = features.mean(axis=0), targets.mean()
    centred = features - mean_x
    gram = centred.T @ centred + alpha * np.eye(features.shape[1])
    moment = centred.T @ (targets - mean_y)
    try:
        weights = np.linalg.solve(gram, moment)
    except np.linalg.LinAlgError:
        # lags that move together (a steady load) at millions of tokens: alpha is lost in the gram's rounding and
        # it is singular; the least-squares solution, as sklearn falls back to
        weights = np.linalg.lstsq(gram, moment, rcond=None)[0]
    return weights, float(mean_y - mean_x @ weights)


def trend(history, num_windows: int = 8) -> np.ndarray:
    """Straight line through the last `num_windows` windows, one window on, >= 0: follows a ramp from a
    few windows, where `ridge` needs many. [W, ...] -> [...]."""
    history = _check_history(history)
    recent = history[-num_windows:]
    if recent.shape[0] < 3:
        return recent[-1]
    t = np.arange(recent.shape[0], dtype=np.float64) - (recent.shape[0] - 1) / 2
    slope = np.tensordot(t, recent - recent.mean(axis=0), axes=1) / (t**2).sum()
    return np.maximum(recent.mean(axis=0) + slope * (t[-1] + 1), 0.0)


CANDIDATES = {
    "last": lambda h: _check_history(h)[-1],
    "ewma1": lambda h: ewma(h, 1.0),
    "ewma4": lambda h: ewma(h, 4.0),
    "ewma16": lambda h: ewma(h, 16.0),
    "ridge": ridge,
    "trend": trend,
}


def _ahead(forecast, history: np.ndarray, horizon: int, ceiling: float = np.inf) -> np.ndarray:
    """[horizon, ...] forecasts from a one-window-ahead candidate, each fed the ones before it."""
    steps = []
    for _ in range(horizon):
        steps.append(np.minimum(forecast(history), ceiling))
        history = np.concatenate([history, steps[-1][None]])
    return np.stack(steps)


def backtest_errors(history, num_folds: int = 4, horizon: int = 1, ceiling: float = np.inf) -> dict[str, float]:
    """Mean absolute error of each candidate over the `horizon` windows after each of the last
    `num_folds` cut points (tokens, or the series' unit)."""
    history = _check_history(history)
    num_folds = max(1, min(num_folds, history.shape[0] - horizon))
    errors = {name: 0.0 for name in CANDIDATES}
    for end in range(history.shape[0] - horizon - num_folds + 1, history.shape[0] - horizon + 1):
        truth = history[end:end + horizon]
        for name, forecast in CANDIDATES.items():
            ahead = _ahead(forecast, history[:end], horizon, ceiling)
            errors[name] += float(np.abs(ahead - truth).mean()) / num_folds
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


MAX_LEVEL_WINDOWS = 16  # what forecast_load backtests on: its candidates' cost grows with the history
TREND_WINDOWS = 12  # the log load's trend is fitted over these; its share that held, over these cut points
TREND_FOLDS = 8
MAX_TREND_FACTOR = 2.0  # the trend moves an expert's forecast at most this factor up or down


def forecast_ahead(history, horizon: int) -> np.ndarray:
    """Mean expected tokens per expert over the next `horizon` windows, [L, E], from history [W, L, E].

    Start from forecast_load's next window (on the last MAX_LEVEL_WINDOWS). Move it along the recent trend of
    each expert's log load to the horizon's middle, by the share of such a trend that held over the same lead in
    the history. That share is a load-weighted least-squares factor in [0, 1] over the last TREND_FOLDS cut
    points. A
    random walk's trends do not hold (about 0: the next window's forecast); a swing between kinds of text
    holds for minutes (near 1). Too short a history for the backtest, or a horizon of one window: the next
    window's forecast.
    """
    history = _check_history(history)
    level = forecast_load(history[-MAX_LEVEL_WINDOWS:])
    num_cuts = history.shape[0] - horizon - TREND_WINDOWS + 1
    if horizon <= 1 or num_cuts < 1:
        return level
    logs, lead = np.log1p(history), (horizon + 1) / 2
    held = moved = 0.0
    for cut in range(history.shape[0] - horizon - min(num_cuts, TREND_FOLDS) + 1, history.shape[0] - horizon + 1):
        step = _log_trend(logs[cut - TREND_WINDOWS:cut]) * lead
        truth = np.log1p(history[cut:cut + horizon].mean(axis=0)) - logs[cut - 1]
        weight = history[cut - 1] / max(float(history[cut - 1].sum()), 1.0)
        held += float((weight * step * truth).sum())
        moved += float((weight * step * step).sum())
    share = float(np.clip(held / moved, 0.0, 1.0)) if moved > 0 else 0.0
    step = np.clip(share * lead * _log_trend(logs[-TREND_WINDOWS:]), -np.log(MAX_TREND_FACTOR),
                   np.log(MAX_TREND_FACTOR))
    return level * np.exp(step)


def _log_trend(logs: np.ndarray) -> np.ndarray:
    """Least-squares slope per window of [W, ...] -> [...]."""
    t = np.arange(logs.shape[0], dtype=np.float64) - (logs.shape[0] - 1) / 2
    return np.tensordot(t, logs - logs.mean(axis=0), axes=1) / (t**2).sum()


MAX_GROWTH = 2.0  # a series forecast never leaves [0, MAX_GROWTH x its highest value so far]
MIN_BACKTEST = 6  # windows a series needs before a candidate is chosen by backtest
PLAUSIBLE_ERROR = 1.5  # candidates within this factor of the best backtest error make up `upper`


class SeriesForecast(NamedTuple):
    values: np.ndarray  # [horizon]
    method: str  # the chosen candidate
    error: float  # its mean absolute backtest error (NaN: too short to backtest)
    upper: np.ndarray  # [horizon] the highest any candidate forecasts: for decisions that must not undershoot
    is_backtested: bool  # chosen by backtest over at least half the horizon (not by default)


def forecast_series(series, horizon: int = 1, num_folds: int = 4) -> SeriesForecast:
    """The next `horizon` values of a non-negative series [W] (oldest first).

    Chosen by backtest over the last `num_folds` cut points when the series has at least MIN_BACKTEST
    windows; EWMA otherwise, with a NaN error. The backtest holds out the horizon, or on a short series as
    many windows as can be held out three times. Fed its own forecasts, a trend model on a short series can run away
    (a step read as a slope), so each step is kept within MAX_GROWTH x the highest value seen."""
    series = np.asarray(series, dtype=np.float64)
    if series.ndim != 1 or series.size == 0:
        raise ValueError(f"series must be [num_windows] with at least one window, got shape {series.shape}")
    if horizon < 1:
        raise ValueError(f"horizon must be >= 1 window, got {horizon}")
    history = _check_history(series[:, None, None])
    ceiling = MAX_GROWTH * float(series.max())
    ahead = {name: _ahead(forecast, history, horizon, ceiling).reshape(horizon)
             for name, forecast in CANDIDATES.items()}
    if history.shape[0] < MIN_BACKTEST:
        return SeriesForecast(ahead["ewma4"], "ewma4", float("nan"), np.max(np.stack(list(ahead.values())), axis=0),
                              False)
    tested = min(horizon, history.shape[0] - 3)
    errors = backtest_errors(history, num_folds, horizon=tested, ceiling=ceiling)
    name = min(errors, key=errors.get)
    plausible = [ahead[n] for n in ahead if errors[n] <= PLAUSIBLE_ERROR * errors[name]]
    return SeriesForecast(ahead[name], name, errors[name], np.max(np.stack(plausible), axis=0),
                          2 * tested >= horizon)
