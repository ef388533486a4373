import numpy as np
import pytest

from controlplane.learn.forecast import ewma, forecast_load


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
