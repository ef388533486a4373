"""The Dynamo-style planner (benchmarks/baselines/dynamo*.py): its predictor, its profile interpolation,
its replica formula, its readiness guard and its load loop, behind our pool planner interface."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
from support.pools import view, window

from benchmarks.baselines.dynamo import DynamoSla
from benchmarks.baselines.dynamo_interpolation import Interpolators
from benchmarks.baselines.dynamo_kalman import Kalman
from benchmarks.pdsim.cost import EngineCost
from benchmarks.pdsim.profile import profile
from controlplane.solve.pools.planning import PoolPlanner

COST = EngineCost()
PROFILE = profile(COST)


def planner(**kwargs) -> DynamoSla:
    return DynamoSla(PROFILE, ttft_target=1.0, itl_target=0.05, prefill_gpus=1, decode_gpus=2, **kwargs)


def test_kalman_follows_a_trend_after_its_minimum_points():
    kalman = Kalman()
    for value in range(1, 4):
        kalman.add(float(value))
    assert kalman.predict() == 3.0  # fewer than 5 points: the last value
    for value in range(4, 21):
        kalman.add(float(value))
    assert kalman.predict() == pytest.approx(21.0, abs=0.5)


def test_interpolation_reproduces_the_profile():
    interp = Interpolators(PROFILE)
    for isl, ttft in zip(PROFILE.prefill_isl, PROFILE.prefill_ttft, strict=True):
        assert interp.prefill_ttft(isl) == pytest.approx(ttft, rel=1e-6)
    assert interp.prefill_ttft(1e9) == pytest.approx(PROFILE.prefill_ttft[-1])  # clamped to the profiled range
    assert interp.best_decode_thpt_per_gpu(0.08, 1500) > interp.best_decode_thpt_per_gpu(0.03, 1500)


def test_replicas_follow_the_published_formula_on_the_interval():
    dynamo = planner()
    assert isinstance(dynamo, PoolPlanner)
    windows = [window(t, rate=12.0) for t in range(10, 190, 10)]
    plan = dynamo.plan(view(windows))
    num_req, isl, osl = 12.0 * 180, 1200.0, 200.0  # one interval of requests, the windows' lengths
    interp = dynamo.interpolators
    p = min(1.0, dynamo.p_correction)
    expected_p = math.ceil(num_req * isl / 180 * p / interp.prefill_thpt_per_gpu(isl) / 1)
    itl = 0.05 / dynamo.d_correction
    expected_d = math.ceil(num_req * osl / 180 / interp.best_decode_thpt_per_gpu(itl, isl + osl / 2) / 2)
    assert (plan.target("prefill"), plan.target("decode")) == (expected_p, expected_d)
    assert "correction p=" in plan.decision("prefill").reason
    between = dynamo.plan(view(windows + [window(190, rate=12.0)]))
    assert all(d.direction == 0 for d in between.decisions)


def test_no_scaling_while_the_deployment_is_not_ready():
    windows = [window(t, rate=40.0) for t in range(10, 190, 10)]
    plan = planner().plan(view(windows, starting={"decode": 1}))
    assert all(d.direction == 0 for d in plan.decisions) and "not ready" in plan.decisions[0].reason


def test_the_load_loop_adds_a_replica_when_every_engine_is_over_target():
    dynamo = planner(enable_load_scaling=True, max_num_batched_tokens=COST.prefill_max_batch_tokens)
    windows = [window(t, rate=r) for t, r in zip(range(10, 100, 10), [6, 8, 10, 12, 6, 8, 10, 12, 6], strict=True)]
    for end in range(1, len(windows) + 1):  # it learns its step-time regressions window by window
        dynamo.plan(view(windows[:end]))
    queued = replace(windows[-1], end=100.0, replicas=tuple(
        replace(r, queued_tokens=200_000.0) if r.role == "prefill" else r for r in windows[-1].replicas))
    plan = dynamo.plan(view(windows + [queued]))
    assert plan.target("prefill") == 3, plan.reason  # every prefill engine's queue is far over its TTFT target
