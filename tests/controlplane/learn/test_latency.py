"""The per-replica latency model (controlplane/learn/latency.py): what it learns from warm windows, that
a new replica's cold windows do not poison it, and that it answers None before it has enough data."""

from __future__ import annotations

import numpy as np
import pytest

from controlplane.learn.latency import COLD_START_WINDOWS, PoolLatency, fit_decode, fit_prefill

CAPACITY, PROMPT, WINDOW = 8000.0, 1200.0, 10.0


def truth_ttft(rho, percentile=90):
    a, b, c = {90: (0.05, 1.0, 1.5), 99: (0.1, 2.0, 3.0)}[percentile]
    service = PROMPT / CAPACITY
    return a + b * service * rho / (1 - rho) + c * service


def prefill_windows(num: int, rng, age, slow: float = 1.0) -> dict:
    """Replica windows at utilisations 0.2..0.85; `slow` stretches busy time and TTFT (a cold replica)."""
    rho = rng.uniform(0.2, 0.85, num)
    tokens = rho * CAPACITY * WINDOW
    noise = rng.normal(1.0, 0.02, (2, num))
    return dict(age=np.full(num, age), prompt_tokens=tokens, busy_seconds=tokens / CAPACITY * slow,
                num_prefilled=tokens / PROMPT, queued_tokens=np.zeros(num),
                ttft_p90=truth_ttft(rho, 90) * slow * noise[0], ttft_p99=truth_ttft(rho, 99) * slow * noise[1])


def concat(*parts: dict) -> dict:
    return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}


def fit(data: dict, queued_before=None, **kwargs):
    columns = {"age_windows": data["age"], "prefill_tokens": data["prompt_tokens"]} | {
        name: data[name] for name in ("busy_seconds", "num_prefilled", "queued_tokens", "ttft_p90", "ttft_p99")}
    if queued_before is not None:
        columns["queued_before"] = queued_before
    return fit_prefill(columns, WINDOW, **kwargs)


def test_prefill_learns_capacity_and_ttft_against_load():
    model = fit(prefill_windows(200, np.random.default_rng(0), age=50))
    assert model.capacity == pytest.approx(CAPACITY, rel=0.01)
    for rho in (0.3, 0.6, 0.9):  # 0.9: past every window it saw
        for percentile in (90, 99):
            assert model.ttft(percentile, rho * CAPACITY, PROMPT) == pytest.approx(truth_ttft(rho, percentile),
                                                                                     rel=0.1)
    assert model.ttft(90, CAPACITY, PROMPT) == float("inf")  # saturated


def test_cold_start_windows_are_left_out():
    rng = np.random.default_rng(1)
    warm = prefill_windows(60, rng, age=50)
    cold = prefill_windows(60, rng, age=COLD_START_WINDOWS - 1, slow=2.0)  # a new replica: half speed
    fitted = fit(concat(warm, cold))
    assert fitted.capacity == pytest.approx(CAPACITY, rel=0.01)
    assert fitted.ttft(90, 0.6 * CAPACITY, PROMPT) == pytest.approx(truth_ttft(0.6), rel=0.1)
    poisoned = fit(concat(warm, cold), cold_start_windows=0)
    assert poisoned.ttft(90, 0.6 * CAPACITY, PROMPT) > 1.2 * truth_ttft(0.6)


def test_windows_draining_a_backlog_are_left_out():
    rng = np.random.default_rng(2)
    backlog = prefill_windows(60, rng, age=50)
    backlog["queued_tokens"] = np.full(60, 10 * CAPACITY)  # 10 s of work queued: an overload's aftermath
    backlog["ttft_p90"] = backlog["ttft_p99"] = np.full(60, 12.0)
    fitted = fit(concat(prefill_windows(60, rng, age=50), backlog))
    assert fitted.ttft(90, 0.6 * CAPACITY, PROMPT) == pytest.approx(truth_ttft(0.6), rel=0.1)


def test_windows_that_begin_with_a_backlog_and_drain_it_are_left_out():
    rng = np.random.default_rng(4)
    steady = prefill_windows(60, rng, age=50)
    steady["queued_before"] = np.zeros(60)
    draining = prefill_windows(60, rng, age=50)  # the queue gone by the window's end, its requests waited it out
    draining["queued_before"] = np.full(60, 10 * CAPACITY)
    draining["ttft_p90"] = draining["ttft_p99"] = np.full(60, 6.0)
    data = concat(steady, draining)
    fitted = fit(data, queued_before=data["queued_before"])
    assert fitted.ttft(90, 0.6 * CAPACITY, PROMPT) == pytest.approx(truth_ttft(0.6), rel=0.1)
    assert fitted.ttft(90, 0.01 * CAPACITY, PROMPT) < 0.5  # no TTFT floor from the overload
    assert fit(data).ttft(90, 0.01 * CAPACITY, PROMPT) > 1.0  # what counting them did


def test_too_few_warm_windows_fall_back_to_none():
    rng = np.random.default_rng(3)
    few = concat(prefill_windows(5, rng, age=50), prefill_windows(40, rng, age=0))
    assert fit(few) is None
    quiet = prefill_windows(40, rng, age=50)
    quiet["num_prefilled"] = np.full(40, 3.0)  # percentiles over 3 requests are noise
    assert fit(quiet) is None
    model = PoolLatency(None, None, 160_000, 96)
    assert model.prefill_ttft(90, 1000.0, PROMPT) is None and model.decode_itl(90, 10, 1e4, 0.0) is None


def decode_windows(num: int, rng, age, slow: float = 1.0) -> dict:
    batch = rng.uniform(5, 80, num)
    kv = batch * rng.uniform(800, 2000, num)
    local = rng.uniform(0, 3000, num) * WINDOW
    step = (0.012 + 0.0006 * batch + 1e-7 * kv + 2e-6 * local / WINDOW) * slow
    return dict(age=np.full(num, age), batch=batch, kv=kv, local=local, mean=step, p90=step * 1.1, p99=step * 1.4)


def fit_d(data: dict, gaps=None, **kwargs):
    columns = {"age_windows": data["age"], "batch": data["batch"], "kv_tokens": data["kv"],
               "prefill_tokens": data["local"], "itl_mean": data["mean"], "itl_p90": data["p90"],
               "itl_p99": data["p99"]}
    if gaps is not None:
        columns["itl_count"] = gaps
    return fit_decode(columns, WINDOW, **kwargs)


def test_decode_learns_the_step_cost_and_ignores_cold_windows():
    rng = np.random.default_rng(4)
    data = concat(decode_windows(100, rng, age=50), decode_windows(50, rng, age=2, slow=2.5))
    model = fit_d(data)
    expected = 0.012 + 0.0006 * 40 + 1e-7 * 50_000 + 2e-6 * 1000
    assert model.itl("mean", 40, 50_000, 1000) == pytest.approx(expected, rel=0.03)
    assert model.itl(99, 40, 50_000, 1000) == pytest.approx(1.4 * expected, rel=0.03)
    assert fit_d(data, cold_start_windows=0).itl("mean", 40, 50_000, 1000) > 1.2 * expected


def test_decode_weighs_windows_by_the_token_gaps_they_measured():
    # busy windows measure hundreds of gaps at the true step cost; near-idle ones a gap or two, a stall included
    rng = np.random.default_rng(6)
    busy, idle = decode_windows(60, rng, age=50), decode_windows(60, rng, age=50, slow=4.0)
    data = concat(busy, idle)
    gaps = np.concatenate([np.full(60, 500.0), np.full(60, 1.0)])
    expected = 0.012 + 0.0006 * 40 + 1e-7 * 50_000 + 2e-6 * 1000
    weighted = fit_d(data, gaps)
    assert weighted.itl("mean", 40, 50_000, 1000) == pytest.approx(expected, rel=0.05)
    assert fit_d(data).itl("mean", 40, 50_000, 1000) > 1.5 * expected


def test_decode_falls_back_to_none_before_enough_warm_windows():
    rng = np.random.default_rng(5)
    assert fit_d(concat(decode_windows(6, rng, age=50), decode_windows(30, rng, age=1))) is None


def test_prefill_ttft_is_unbounded_past_the_utilisation_ceiling():
    model = PoolLatency(fit(prefill_windows(200, np.random.default_rng(6), age=50)), None, 160_000, 96)
    busy = 0.75 * model.prefill.capacity  # tokens/s: a replica 75 % busy
    assert np.isfinite(model.prefill_ttft(99, busy, PROMPT))
    capped = model.with_prefill_limits(0.7, None)
    assert capped.prefill_ttft(99, busy, PROMPT) == float("inf")
    assert capped.prefill_ttft(99, 0.65 * model.prefill.capacity, PROMPT) == model.prefill_ttft(
        99, 0.65 * model.prefill.capacity, PROMPT)
