import numpy as np
import pytest

from controlplane.learn.forecast import backtest_errors, ewma, forecast_load


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
