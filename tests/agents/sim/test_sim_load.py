"""The one load model (agents/sim/load.py) the simulated engine and the simulated fleet share."""

from __future__ import annotations

import numpy as np

from agents.sim.load import LoadModel


def test_popularity_is_skewed_with_its_own_hot_experts_per_layer():
    model = LoadModel(num_layers=8, num_experts=64, top_k=6, seed=1)
    popularity = model.popularity()
    np.testing.assert_allclose(popularity.sum(axis=1), 1.0)
    assert (popularity.max(axis=1) > 8 / 64).all()  # the hottest expert takes 8x an even share or more
    assert len(set(popularity.argmax(axis=1).tolist())) > 1  # not the same hot expert in every layer


def test_the_same_seed_and_the_same_drifts_give_the_same_load():
    a, b = LoadModel(4, 32, 4, seed=5), LoadModel(4, 32, 4, seed=5)
    for _ in range(10):
        a.drift()
        b.drift()
    np.testing.assert_array_equal(a.popularity(), b.popularity())
    assert not np.allclose(a.popularity(), LoadModel(4, 32, 4, seed=6).popularity())


def test_routing_with_a_ranks_own_generator_leaves_the_shared_popularity_alone():
    shared, alone = LoadModel(4, 32, 4, seed=2), LoadModel(4, 32, 4, seed=2)
    tokens = shared.route(shared.popularity(), 100, rng=np.random.default_rng(9))
    assert tokens.shape == (4, 32) and (tokens.sum(axis=1) == 100 * 4).all()
    shared.drift()
    alone.drift()
    np.testing.assert_array_equal(shared.popularity(), alone.popularity())


def test_drift_moves_hotness_slowly():
    model = LoadModel(4, 32, 4, seed=3, drift_sigma=0.03)
    before = model.popularity()
    model.drift()
    ratio = model.popularity() / before
    assert ratio.max() < 1.2 and ratio.min() > 0.8  # a step of a few percent, never a jump
    for _ in range(2000):
        model.drift()
    assert not np.array_equal(model.popularity().argmax(axis=1), before.argmax(axis=1))


def test_a_swing_moves_the_hot_set_between_two_kinds_of_text():
    model = LoadModel(4, 32, 4, seed=4, swing_period_seconds=120.0)
    np.testing.assert_allclose(model.popularity(0.0), model.kinds[0] / model.kinds[0].sum(axis=1, keepdims=True))
    np.testing.assert_allclose(model.popularity(60.0), model.kinds[1] / model.kinds[1].sum(axis=1, keepdims=True))
    np.testing.assert_allclose(model.popularity(120.0), model.popularity(0.0))
    assert not np.array_equal(model.popularity(0.0).argmax(axis=1), model.popularity(60.0).argmax(axis=1))
    steady = LoadModel(4, 32, 4, seed=4)  # no swing: the clock does not matter
    np.testing.assert_array_equal(steady.popularity(60.0), steady.popularity(0.0))


def test_steps_scatter_around_the_window_only_as_far_as_step_sigma_says():
    model = LoadModel(4, 32, 4, seed=7, min_exponent=0.2, max_exponent=0.5)
    popularity = model.popularity()
    calm = model.route_steps(popularity, 200, 4096, np.random.default_rng(0))
    assert calm.shape == (200, 4, 32) and calm.dtype == np.int64
    np.testing.assert_allclose(calm.mean(0) / (4096 * 4), popularity, rtol=0.05, atol=1e-3)  # Poisson around it
    bursty = LoadModel(4, 32, 4, seed=7, min_exponent=0.2, max_exponent=0.5, step_sigma=0.3)
    assert np.allclose(bursty.popularity(), popularity)  # the dispersion draws only from the rng it is given
    steps = bursty.route_steps(popularity, 200, 4096, np.random.default_rng(0))
    assert (steps / steps.sum(-1, keepdims=True)).std(0).mean() > 2 * (calm / calm.sum(-1, keepdims=True)).std(0).mean()
