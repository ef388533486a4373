"""The step oracle (benchmarks/baselines/oracle.py): low sizes, the whole budget from the first window that
measured the step, low again after the fall; sized from the step trace and the benchmark's budget."""

from __future__ import annotations

from support.pools import TARGETS, view, window

from benchmarks.baselines.oracle import StepOracle
from benchmarks.pdsim.simulator import SimConfig
from benchmarks.pdsim.trace import step


def test_it_jumps_to_the_high_sizes_only_between_the_step_and_the_fall():
    oracle = StepOracle({"prefill": 2, "decode": 3}, {"prefill": 16, "decode": 16}, up_at=130.0, down_at=250.0)
    for now, expected in ((120.0, (2, 3)), (130.0, (16, 16)), (240.0, (16, 16)), (250.0, (2, 3))):
        plan = oracle.plan(view([window(now)]))
        assert (plan.target("prefill"), plan.target("decode")) == expected, now


def test_for_step_fills_the_budget_from_the_first_window_after_the_step():
    trace = step(360, 2.0, 6.0, seed=0)  # the step at 120 s, the fall at 240 s
    config = SimConfig(targets=TARGETS, initial={}, gpu_budget=20)
    oracle = StepOracle.for_step(trace, config, max_replicas=16)
    assert (oracle.up_at, oracle.down_at) == (130.0, 250.0)
    assert oracle.high == {"prefill": 6, "decode": 7}  # 6 x 1 + 7 x 2 GPUs <= 20
    assert 1 <= oracle.low["prefill"] <= oracle.high["prefill"] and 1 <= oracle.low["decode"] <= oracle.high["decode"]
