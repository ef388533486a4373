import numpy as np
import pytest

from controlplane.learn.forecast import (
    MAX_LEVEL_WINDOWS,
    backtest_errors,
    ewma,
    forecast_ahead,
    forecast_load,
    forecast_series,
    ridge,
)


def test_constant_history_forecasts_itself():
    history = np.broadcast_to(np.arange(6.0).reshape(2, 3), (5, 2, 3))
    np.testing.assert_allclose(forecast_load(history), history[0])


def test_ewma_weights_recent_windows_more():
    history = np.array([[[0.0]], [[0.0]], [[10.0]]])
    recent = ewma(history, half_life=1.0)[0, 0]
    assert ewma(history, half_life=100.0)[0, 0] < recent < 10.0


@pytest.mark.parametrize("history", [np.ones((2, 3)), -np.ones((2, 1, 1)), np.full((1, 1, 1), np.inf)])
def test_bad_history_raises(history):
    with pytest.raises(ValueError):
        forecast_load(history)


def test_trend_is_followed_better_than_by_a_mean():
    # every expert's load grows linearly: a mean lags, the selected model must not
    windows = np.arange(12.0)[:, None, None]
    rate = np.random.default_rng(0).uniform(1, 5, (1, 2, 6))
    history = 100 + windows * rate
    truth = 100 + 12 * rate[0]
    assert np.abs(forecast_load(history) - truth).max() < np.abs(ewma(history) - truth).max()


def test_noisy_stationary_load_prefers_smoothing_over_the_last_window():
    rng = np.random.default_rng(1)
    history = rng.poisson(200, (30, 3, 16)).astype(float)
    errors = backtest_errors(history)
    assert errors["ewma16"] < errors["last"]
    assert np.abs(forecast_load(history) - 200).mean() < np.abs(history[-1] - 200).mean()


def test_series_forecast_follows_a_ramp_by_backtest():
    ramp = 10 + 0.5 * np.arange(30.0) + np.random.default_rng(2).normal(0, 0.2, 30)
    forecast = forecast_series(ramp, horizon=6)
    assert forecast.method in ("trend", "ridge") and forecast.is_backtested
    truth = 10 + 0.5 * np.arange(30, 36)
    assert np.abs(forecast.values - truth).max() < 1.5
    assert forecast.error < 1.0 and (forecast.upper >= forecast.values).all()


def test_series_forecast_smooths_noise_instead_of_extrapolating_it():
    noise = np.random.default_rng(3).poisson(100, 40).astype(float)
    forecast = forecast_series(noise, horizon=4)
    assert forecast.method.startswith("ewma")
    assert np.abs(forecast.values - 100).max() < 10


def test_series_forecast_on_a_short_series_is_not_backtested():
    short = forecast_series([5.0, 6.0, 7.0], horizon=4)
    assert short.method == "ewma4" and np.isnan(short.error) and not short.is_backtested
    partly = forecast_series(np.arange(1.0, 9.0), horizon=12)  # backtested over 5 windows of the 12 asked
    assert not partly.is_backtested and not np.isnan(partly.error)
    assert forecast_series(np.arange(1.0, 9.0), horizon=10).is_backtested  # 5 of 10: half the horizon


def test_series_forecast_cannot_run_away():
    step = np.array([10.0] * 8 + [30.0, 50.0])  # a step a trend would read as a slope
    forecast = forecast_series(step, horizon=20)
    assert forecast.upper.max() <= 2 * step.max()


@pytest.mark.parametrize("series, horizon", [(np.ones((3, 2)), 1), ([], 1), ([1.0, 2.0], 0), ([-1.0, 2.0], 1)])
def test_bad_series_raises(series, horizon):
    with pytest.raises(ValueError):
        forecast_series(series, horizon)


@pytest.mark.parametrize("tokens", [1e3, 1e6, 1e9])
def test_a_steady_load_of_millions_of_tokens_forecasts_itself(tokens):
    """Every lag equal and the counts large: the ridge's gram is singular in floating point; the forecast
    still stands (the reconcile loop failed every pass on a steady DeepSeek-sized fleet)."""
    load = np.random.default_rng(0).uniform(0, tokens, (58, 256))
    history = np.broadcast_to(load, (24, 58, 256)).copy()
    np.testing.assert_allclose(ridge(history), load, rtol=1e-6)
    assert set(backtest_errors(history)) >= {"ridge", "ewma4"}


def _swing(num_windows: int, seed: int) -> np.ndarray:
    """[num_windows, 3, 32] tokens: two kinds of text, each with its own hot experts, their mix moving 2% a
    window (a 20-minute swing of 5 s windows near its steepest), with a little routing noise."""
    rng = np.random.default_rng(seed)
    kinds = rng.pareto(1.5, (2, 3, 32)) + 0.1
    mix = 0.1 + 0.02 * np.arange(num_windows)[:, None, None]
    load = 1e5 * ((1 - mix) * kinds[0] + mix * kinds[1])
    return load * rng.lognormal(0.0, 0.01, load.shape)


def test_the_load_over_a_horizon_follows_a_swing_the_next_window_lags():
    history, horizon = _swing(40 + 12, seed=3), 12
    truth = history[40:].mean(axis=0)
    ahead_error = np.abs(forecast_ahead(history[:40], horizon) - truth).mean()
    assert ahead_error < 0.5 * np.abs(forecast_load(history[:40]) - truth).mean()


def test_a_random_walk_has_no_trend_to_follow():
    # a lognormal walk: its recent trends do not hold, so the horizon's forecast is the next window's, near enough
    rng = np.random.default_rng(4)
    walk = 1e5 * np.exp(np.cumsum(rng.normal(0.0, 0.04, (52, 3, 32)), axis=0))
    truth = walk[40:].mean(axis=0)
    ahead, level = forecast_ahead(walk[:40], 12), forecast_load(walk[:40][-MAX_LEVEL_WINDOWS:])
    assert np.abs(ahead / level - 1).max() < 0.05
    assert np.abs(ahead - truth).mean() < 1.05 * np.abs(level - truth).mean()


def test_one_window_ahead_or_a_short_history_is_the_next_windows_forecast():
    history = _swing(40, seed=5)
    np.testing.assert_array_equal(forecast_ahead(history, 1), forecast_load(history[-MAX_LEVEL_WINDOWS:]))
    np.testing.assert_array_equal(forecast_ahead(history[:20], 12), forecast_load(history[:20]))
