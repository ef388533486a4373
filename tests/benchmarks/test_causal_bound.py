"""The twin-trace bound (benchmarks/causal_bound.py) against brute force over every pair of schedules that agree
until the twins part, on made-up values."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from benchmarks import causal_bound


def served(value: np.ndarray, tables: tuple[int, ...], stall_ratio: float) -> float:
    switches = [w for w in range(1, len(tables)) if tables[w] != tables[w - 1]]
    return sum(value[w, t] for w, t in enumerate(tables)) - sum(stall_ratio * value[w, tables[w]] for w in switches)


def brute_mean_share(value: np.ndarray, start: int, stall_ratio: float, w0: int) -> float:
    num_windows, num_tables = value.shape
    value_b = value[causal_bound.reflected(num_windows, w0)]
    everything = [(start, *rest) for rest in itertools.product(range(num_tables), repeat=num_windows - 1)]
    gains = [max(served(v, s, stall_ratio) for s in everything) - v[:, start].sum() for v in (value, value_b)]
    best = -np.inf
    for prefix in (s for s in everything if all(t == start for t in s[w0 + 1:])):  # each shared prefix once
        shares = [max(served(v, prefix[:w0 + 1] + rest, stall_ratio)
                      for rest in itertools.product(range(num_tables), repeat=num_windows - w0 - 1))
                  - v[:, start].sum() for v in (value, value_b)]
        best = max(best, (shares[0] / gains[0] + shares[1] / gains[1]) / 2)
    return best


@pytest.mark.parametrize("stall_ratio", [0.0, 0.4, 3.0])
@pytest.mark.parametrize("w0", [1, 3, 4])
def test_the_program_finds_the_best_pair_that_agrees_until_the_twins_part(stall_ratio, w0):
    value = np.random.default_rng(w0).uniform(1.0, 1.6, size=(6, 3))
    found = causal_bound.twin_bound(value, 0, stall_ratio, w0)
    if np.isnan(found.mean_share):  # a trace whose bound gains nothing over static has no share to take
        assert min(found.gain_a, found.gain_b) <= 1e-9
        return
    assert found.mean_share == pytest.approx(brute_mean_share(value, 0, stall_ratio, w0))
    assert found.mean_share <= 1 + 1e-9


def test_a_twin_that_is_the_trace_itself_costs_nothing_and_one_that_is_not_does():
    """Load that comes back the way it went: the twin is the trace, and a controller takes all of the bound. The
    same past with another table paying after w0: what pays on one twin is a loss on the other, and no schedule
    that agrees until w0 takes all of both bounds."""
    w0 = 3
    past = np.array([[1.0, 1.0, 1.1], [1.0, 1.0, 1.2], [1.0, 1.0, 1.3]])  # table 2 pays more and more
    mirrored = np.vstack([past, past[::-1]])
    assert np.array_equal(mirrored[causal_bound.reflected(6, w0)], mirrored)
    assert causal_bound.twin_bound(mirrored, 0, 0.5, w0).mean_share == pytest.approx(1.0)
    diverging = np.vstack([past, [[1.0, 2.0, 0.6]] * 3])  # after w0, table 1 pays and table 2 loses
    twin = causal_bound.twin_bound(diverging, 0, 0.5, w0)
    assert twin.gain_a > 0 and twin.gain_b > 0
    assert twin.mean_share == pytest.approx(brute_mean_share(diverging, 0, 0.5, w0))
    assert twin.mean_share < 0.95


def test_reflected_runs_back_then_forth():
    assert causal_bound.reflected(10, 3).tolist() == [0, 1, 2, 2, 1, 0, 0, 1, 2, 2]
