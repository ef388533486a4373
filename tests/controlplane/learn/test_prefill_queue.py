"""TTFT percentiles of a prefill pool as an M/G/c queue over a mix of prompt lengths."""

from __future__ import annotations

import numpy as np
import pytest

from controlplane.learn.prefill_queue import erlang_c, ttft_percentile


def test_erlang_c_is_the_utilisation_with_one_server_and_falls_with_more():
    assert erlang_c(1, 0.6) == pytest.approx(0.6)
    assert erlang_c(2, 1.0) == pytest.approx(1 / 3)  # M/M/2 at rho 0.5: 2 rho^2 / (1 + rho)
    assert erlang_c(4, 2.0) < erlang_c(2, 1.0) and erlang_c(1_000_000, 2.0) == 0.0 and erlang_c(3, 3.0) == 1.0


def test_an_idle_pool_answers_each_prompts_own_service():
    service, shares = np.array([0.1, 1.5]), np.array([0.9, 0.1])
    assert ttft_percentile(50, 1e-9, service, shares, 4, 0.02) == pytest.approx(0.12, abs=1e-6)
    assert ttft_percentile(99, 1e-9, service, shares, 4, 0.02) == pytest.approx(1.52, abs=1e-6)


def test_the_same_mean_with_a_long_tail_waits_longer():
    short = ttft_percentile(90, 6.0, np.array([0.2]), np.array([1.0]), 2)
    mixed = ttft_percentile(90, 6.0, np.array([0.1, 1.1]), np.array([0.9, 0.1]), 2)  # mean 0.2 s too
    assert mixed > short > 0.2


def test_more_load_waits_longer_and_past_the_servers_never_ends():
    ttft = [ttft_percentile(99, rate, np.array([0.1, 1.0]), np.array([0.9, 0.1]), 3) for rate in (2, 8, 12, 14)]
    assert ttft == sorted(ttft) and ttft[0] < ttft[-1] < float("inf")
    assert ttft_percentile(99, 16, np.array([0.1, 1.0]), np.array([0.9, 0.1]), 3) == float("inf")
