"""How long the hot experts stay hot: the persistence of the expert-load skew, from the window history. Pure.

A placement change is fitted to which experts are hot now; its gain lasts as long as that skew does. The skew of a
window is each expert's share of its layer's load minus the even share 1/E. Its autocorrelation at lag k windows,
c(k) = <d_t, d_t+k> / <d_t, d_t> (summed over layers and experts, mean over t), falls as the hot set moves. Sampling
noise lowers every lag's c alike, so the decay is read relative to lag 1: c(k)/c(1) is the share of a gain
fitted to the skew now that is left k - 1 windows later. The skew that does not survive even one window (c(1)
under `MIN_PERSISTENT_SHARE` of c(0)) is noise, which no placement keeps up with: its persistence is one window.

history: [W, L, E] tokens per window, oldest first (as controlplane/learn/forecast.py). Returns windows.

The skew's persistence says how long any hot set lasts; `gain_held_windows` says how long the particular gain a
change would make has been there (a new placement's gain over one in force fitted to much the same skew is younger
than the skew). A change is priced on the shorter.
"""

from __future__ import annotations

import math

import numpy as np

MIN_PERSISTENT_SHARE = 0.2  # c(1)/c(0) under this: the window-to-window skew is mostly sampling noise
MAX_LAG = 32  # lags measured; a longer history only adds more pairs per lag


def skew(history) -> np.ndarray:
    """Each window's share of its layer's load minus the even share: [W, L, E] tokens -> [W, L, E]."""
    history = np.asarray(history, dtype=np.float64)
    if history.ndim != 3 or 0 in history.shape:
        raise ValueError(f"history must be [num_windows, num_layers, num_experts], got shape {history.shape}")
    totals = history.sum(axis=2, keepdims=True)
    share = np.divide(history, totals, out=np.full_like(history, 1.0 / history.shape[2]), where=totals > 0)
    return share - 1.0 / history.shape[2]


def skew_autocorrelation(history, max_lag: int = MAX_LAG) -> np.ndarray:
    """c(k) for k = 0 .. min(max_lag, W - 1): [K + 1], c(0) = 1 (0 everywhere when no window has any skew)."""
    d = skew(history).reshape(np.shape(history)[0], -1)
    power = float((d * d).sum(axis=1).mean())
    if power <= 0:
        return np.zeros(min(max_lag, d.shape[0] - 1) + 1)
    return np.array([float((d[:d.shape[0] - k] * d[k:]).sum(axis=1).mean()) / power
                     for k in range(min(max_lag, d.shape[0] - 1) + 1)])


def persistence_windows(history, max_windows: float) -> float:
    """How many windows of its full size a gain fitted to the skew now is worth, up to `max_windows` ahead.

    The sum of c(k)/c(1) (each in [0, 1]) over the lags the history measures, then past them the last lag's level
    decaying at the rate fitted over the measured lags (c(k)/c(1) ~ exp(-(k-1)/tau), least squares on the logs): a
    skew as stable as its noise is worth up to `max_windows`, one whose hot set drifts away less. Fewer than three
    windows: one window (nothing is priced past what was seen). Skew that does not survive one window (noise): one
    window."""
    c = skew_autocorrelation(history)
    if c.size < 3 or c[1] <= MIN_PERSISTENT_SHARE * c[0]:  # no skew at all: c is 0 everywhere
        return 1.0
    ratio = np.clip(c[1:] / c[1], 0.0, 1.0)[:max(int(max_windows), 1)]
    lags = np.arange(ratio.size, dtype=np.float64)
    kept = ratio > 1e-3  # past where the skew decorrelated, the log is noise
    slope = float((lags[kept] * np.log(ratio[kept])).sum() / (lags[kept] ** 2).sum()) if kept.sum() > 1 else 0.0
    rest = max(max_windows - ratio.size, 0.0)
    level = float(ratio[-1])
    tail = level * rest if slope >= 0 else level * -math.expm1(slope * rest) / -slope
    return float(min(ratio.sum() + tail, max_windows))


def gain_held_windows(gains) -> float:
    """How many windows back a change's gain has held at its size now: gains [W] the gain it would have had in each
    past window (oldest first), the last the size now. The sum, newest first, of each window's gain over the gain
    now (in [0, 1]). A gain that appeared this minute has held for a minute and is expected to hold about as long
    again; one that every window of the history shows, at least as long as the history. 0 where there is no gain."""
    gains = np.asarray(gains, dtype=np.float64)
    if gains.ndim != 1 or gains.size == 0 or not np.isfinite(gains).all():
        raise ValueError(f"gains must be finite [num_windows], got shape {gains.shape}")
    if gains[-1] <= 0:
        return 0.0
    return float(np.clip(gains / gains[-1], 0.0, 1.0).sum())
