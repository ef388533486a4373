"""controlplane/learn/persistence.py: how long the hot set stays hot, from the window history."""

import numpy as np

from agents.sim.load import LoadModel
from controlplane.learn.persistence import gain_held_windows, persistence_windows, skew_autocorrelation


def history(drift_sigma: float, num_windows: int = 96, swing_period_seconds: float | None = None,
            min_exponent: float = 0.6, max_exponent: float = 0.9) -> np.ndarray:
    load = LoadModel(4, 64, 8, seed=0, drift_sigma=drift_sigma, swing_period_seconds=swing_period_seconds,
                     min_exponent=min_exponent, max_exponent=max_exponent)
    rng, windows = np.random.default_rng(1), []
    for index in range(num_windows):
        windows.append(load.route(load.popularity(index * 5.0), 50_000, rng))
        load.drift()
    return np.stack(windows)


def test_a_steady_skew_persists_to_the_limit_and_a_moving_one_less_the_faster_it_moves():
    steady, slow, fast = (persistence_windows(history(sigma), 720) for sigma in (0.0, 0.05, 0.4))
    assert steady > 700
    assert steady > slow > fast > 1


def test_noise_without_a_lasting_skew_persists_one_window():
    even = np.random.default_rng(0).poisson(1000.0, size=(48, 4, 64)).astype(float)
    assert skew_autocorrelation(even)[1] < 0.2
    assert persistence_windows(even, 720) == 1.0


def test_too_short_or_unskewed_a_history_persists_one_window():
    assert persistence_windows(history(0.0, num_windows=2), 720) == 1.0
    assert persistence_windows(np.full((10, 2, 8), 5.0), 720) == 1.0


def test_a_gain_has_held_as_many_windows_as_it_was_there_at_its_size_now():
    assert gain_held_windows([0.1] * 30) == 30.0
    assert gain_held_windows([0.0] * 27 + [0.1] * 3) == 3.0  # it appeared three windows ago
    assert gain_held_windows([0.05] * 10 + [0.1] * 3) == 8.0  # at half its size before: half a window each
    assert gain_held_windows([0.2, -0.1, 0.1]) == 2.0  # a loss counts nothing, more than now counts as now
    assert gain_held_windows([0.1, 0.0]) == 0.0
