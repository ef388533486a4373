"""The controller's pool planner (controlplane/plan/pools.py): policy to targets and rules, learning from
the windows, and a plan from a view."""

from __future__ import annotations

from dataclasses import replace

import pytest
from pydantic import ValidationError
from support.pools import view, window

from controlplane.desired import LatencySlo, Policy
from controlplane.learn.latency import COLD_START_WINDOWS
from controlplane.plan.pools import (
    ForecastSpans,
    MoectlPoolPlanner,
    _queued_before,
    fit_latency,
    forecast_load,
    planner_for,
    rules_of,
    targets_of,
)
from controlplane.solve.pools.decision import DecisionKind
from controlplane.solve.pools.load import burst_peak_rate, load_series, measured_load, sure_rate
from controlplane.solve.pools.planning import PoolPlanner
from controlplane.solve.pools.rules import PoolRules
from controlplane.solve.pools.view import SloTarget


def test_policy_slo_becomes_targets_and_rules():
    policy = Policy(slo={"ttft_p99_seconds": 2.0, "itl_p90_seconds": 0.05}, pool_cooldown_seconds=120,
                    pool_predictive_interval_seconds=60)
    assert targets_of(policy.slo) == (SloTarget("ttft", 99, 2.0), SloTarget("itl", 90, 0.05))
    rules = rules_of(policy)
    assert (rules.cooldown_seconds, rules.predictive_interval_seconds, rules.threshold.cooldown_seconds) == \
        (120, 60, 120)
    assert rules.size_prefill_by_mix and not rules_of(policy.model_copy(
        update={"pool_size_prefill_by_mix": False})).size_prefill_by_mix
    assert Policy().slo is None  # pools are not planned unless asked
    # the load "now" spans 20 s whatever the window: 2 s windows' rates are a few arrivals each
    assert planner_for(policy, 2.0, 15.0).load_windows == 10 and planner_for(policy, 10.0, 120.0).load_windows == 2


@pytest.mark.parametrize("slo, message", [
    ({}, "at least one target"),
    ({"ttft_p90_seconds": 2.0, "ttft_p99_seconds": 1.0}, "ttft_p99_seconds 1.0 is under ttft_p90_seconds 2.0"),
    ({"itl_p90_seconds": 0}, "greater than 0"),
    ({"itl_p95_seconds": 0.05}, "Extra inputs"),
])
def test_bad_slo_is_refused_with_the_reason(slo, message):
    with pytest.raises(ValidationError, match=message):
        LatencySlo(**slo)


def test_the_model_is_fitted_from_replica_windows():
    windows = [window(t, rate=r, ttft=0.2 + 0.02 * r, itl=0.01 + 0.001 * r)
               for t, r in zip(range(10, 400, 10), [6, 8, 10, 12, 14] * 8, strict=False)]
    model = fit_latency(tuple(windows))
    assert model.prefill is not None and model.decode is not None
    assert model.kv_capacity_tokens == 160_000 and model.max_batch == 96
    assert fit_latency(tuple(windows[:2])).prefill is None  # too few windows: no fit yet
    assert fit_latency(()) is None


def test_measured_load_and_its_series():
    windows = tuple(window(t, rate=10.0 + (t >= 300) * 10) for t in range(10, 610, 10))
    now = measured_load(windows, num_windows=2)
    assert now.request_rate == pytest.approx(20.0) and now.remote_share == pytest.approx(0.8)
    assert now.remote_prompt_tokens == pytest.approx(1200.0, rel=0.01)
    rate, prompt, output = load_series(windows, 60.0)
    # buckets (0, 60] ... (540, 600]; the window ending at 300 is the first at 20 req/s
    assert rate.tolist() == pytest.approx([10.0] * 4 + [(5 * 10 + 20) / 6] + [20.0] * 5)
    forecast = forecast_load(windows, now, ForecastSpans(60.0, 300.0, 420.0, 1.0, 4))
    assert forecast.request_rate >= now.request_rate and forecast.held >= forecast.request_rate


def test_the_planner_plans_from_a_view():
    planner = MoectlPoolPlanner()
    assert isinstance(planner, PoolPlanner)
    windows = [window(t) for t in range(10, 190, 10)]
    plan = planner.plan(view(windows))
    assert [d.role for d in plan.decisions] == ["prefill", "decode"]
    # three minutes of steady load: too little history to trust a scale-down
    assert all(d.direction == 0 for d in plan.decisions)
    assert plan.threshold is not None
    stale = planner.plan(view(windows, now=400.0))
    assert all(d.kind == DecisionKind.hold for d in stale.decisions)


def test_the_sure_rate_is_a_count_less_its_noise_over_the_span_that_tells_most():
    # 10 req/s, then 12 for the last 8 windows: 20 s count 240 arrivals (11.2 req/s surely), 80 s count 960
    # (11.6 req/s surely): a small step shows over the longer span
    windows = tuple(window(t, rate=10.0 + 2.0 * (t > 400)) for t in range(10, 490, 10))
    assert sure_rate(windows, 2, 1.0, num_spans=1) == pytest.approx((240 - 240**0.5) / 20)
    assert sure_rate(windows, 2, 1.0) == pytest.approx((960 - 960**0.5) / 80)
    assert sure_rate(windows, 2, 0.0) == pytest.approx(12.0)
    assert sure_rate((), 2, 1.0) is None
    planned = MoectlPoolPlanner().plan(view(list(windows)))
    assert planned.load.sure_rate == pytest.approx((960 - 960**0.5) / 80)


def test_the_forecast_is_floored_at_the_rate_the_counts_surely_exceed_not_at_a_noisy_count():
    # a flat 10 req/s, then two windows at 12 (a blip a 20 s count shows; its bucket is still filling, so every
    # candidate forecasts the flat 10): the floor is what 240 arrivals in 20 s surely are, 11.2 req/s, not 12
    windows = tuple(window(t, rate=10.0 + 2.0 * (t > 600)) for t in range(10, 630, 10))
    now = measured_load(windows, num_windows=2)
    assert now.request_rate == pytest.approx(12.0)
    sure = replace(now, sure_rate=sure_rate(windows, 2, 1.0))
    assert sure.surely == pytest.approx((240 - 240**0.5) / 20)
    forecast = forecast_load(windows, sure, ForecastSpans(60.0, 300.0, 420.0, 0.0, 4), (120.0, 180.0))
    assert forecast.request_rate == pytest.approx(sure.surely)
    assert forecast.warm_rate == pytest.approx(sure.surely) and forecast.held == pytest.approx(sure.surely)
    # without a sure rate, the measured one is the floor (never above it either: a long span can say more)
    assert forecast_load(windows, now, ForecastSpans(60.0, 300.0, 420.0, 0.0, 4)).request_rate == pytest.approx(12.0)
    assert replace(now, sure_rate=13.0).surely == pytest.approx(12.0)


def test_the_planner_and_the_learner_agree_on_the_cold_windows():
    """The windows the latency model leaves out are those whose breaches the reactive step discounts."""
    assert PoolRules().cold_start_windows == COLD_START_WINDOWS


def test_a_prefill_window_begins_with_the_queue_its_replica_ended_the_previous_one_with():
    first, second = window(10.0), window(20.0)
    first = replace(first, replicas=tuple(replace(r, queued_tokens=5000.0) if r.replica == "p1" else r
                                          for r in first.replicas))
    # p1 reports first in the second window, and a replica new there (p2) began with nothing queued
    second = replace(second, replicas=tuple(reversed(second.of_role("prefill"))) + second.of_role("decode")
                     + (replace(second.of_role("prefill")[0], replica="p2"),))
    assert _queued_before((first, second)).tolist() == [0.0, 0.0, 5000.0, 0.0, 0.0]


def test_a_burst_is_a_bucket_that_jumped_over_the_ones_before_it():
    # 60 s buckets: 10 req/s, 30 in (60, 120], 10 again; then a smooth rise 10 -> 20 over (180, 360]
    windows = tuple(window(t, rate=30.0 if 60 < t <= 120 else 10.0 + 10.0 * max(0, min(t, 360) - 180) / 180)
                    for t in range(10, 361, 10))
    assert burst_peak_rate(windows, 300.0, 60.0, 1.5, 60.0) == pytest.approx(30.0)
    assert burst_peak_rate(windows, 180.0, 60.0, 1.5, 60.0) is None  # the burst is older; the rise is smooth
    # the rise of (180, 360] over 180 s is 10 -> ~19 req/s: a burst when judged over that long
    assert burst_peak_rate(windows, 180.0, 60.0, 1.5, 180.0) > 15.0
    assert burst_peak_rate((), 300.0, 60.0, 1.5, 60.0) is None
