"""controlplane/plan/change_price.py: a change is made when its gain over the horizon beats its cost with a margin."""

import numpy as np
import pytest

from agents.protocol.placement import PlacementTable
from controlplane.plan.change_price import (
    ENGINE_PRIORS,
    GAIN_WINDOWS,
    ChangeCost,
    ChangeQuote,
    StepModel,
    fit_step_model,
    price_change,
    price_placement,
)

STEP = StepModel(fixed_seconds=0.07, seconds_per_imbalance=0.03)  # 0.1 s at max/mean 1.0


def quote(cost_seconds: float, horizon_seconds: float = 600.0, before: float = 1.3, after: float = 1.1,
          margin: float = 1.25) -> ChangeQuote:
    return ChangeQuote(before, after, STEP, horizon_seconds, ChangeCost(cost_seconds, "test"), margin)


def test_a_change_whose_gain_is_below_its_cost_is_not_made_and_is_made_when_the_cost_is_lower():
    # 0.109 s -> 0.103 s a step: 5.8% more steps, over 600 s worth ~35 s of capacity
    price = price_change(quote(cost_seconds=180.0))
    assert not price.is_paying and price.gain_seconds < price.margin * price.cost_seconds
    assert price.gain_share == pytest.approx(0.109 / 0.103 - 1)
    assert price.gain_seconds == pytest.approx(price.gain_share * 600.0)
    cheap = price_change(quote(cost_seconds=0.91))
    assert cheap.is_paying and cheap.gain_seconds == price.gain_seconds
    # the numbers an action records, with where the cost comes from
    assert cheap.to_json()["cost_seconds"] == 0.91 and cheap.to_json()["cost_source"] == "test"
    assert "0.91s" in cheap.reason and ">=" in cheap.reason


def test_the_margin_and_the_horizon_decide_a_close_call():
    gain_seconds = price_change(quote(cost_seconds=1.0)).gain_seconds
    cost = gain_seconds / 1.1  # the gain beats the cost by 10%
    assert price_change(quote(cost, margin=1.0)).is_paying
    assert not price_change(quote(cost, margin=1.25)).is_paying
    assert price_change(quote(cost, margin=1.25, horizon_seconds=1200.0)).is_paying  # it holds twice as long


def test_a_change_that_gains_nothing_is_never_paid_for_even_for_free():
    assert not price_change(quote(cost_seconds=0.0, after=1.3)).is_paying
    assert not price_change(quote(cost_seconds=0.0, after=1.4)).is_paying  # worse
    assert not price_change(quote(cost_seconds=0.0, horizon_seconds=0.0)).is_paying


def test_the_step_model_is_fitted_where_the_windows_span_the_imbalance_and_assumed_where_not():
    imbalances = np.array([1.05, 1.1, 1.2, 1.3])
    fitted = fit_step_model(imbalances, STEP.seconds(imbalances))
    assert fitted.seconds_per_imbalance == pytest.approx(0.03) and fitted.fixed_seconds == pytest.approx(0.07)
    flat = fit_step_model([1.2, 1.205], [0.2, 0.2], moe_share=0.25)
    assert flat.seconds(1.2025) == pytest.approx(0.2)
    assert flat.seconds_per_imbalance * 1.2025 == pytest.approx(0.25 * 0.2)
    with pytest.raises(ValueError, match="finite"):
        fit_step_model([1.1, np.nan], [0.1, 0.1])


def test_a_busier_batch_does_not_hide_what_the_busiest_gpu_costs():
    """Busy windows: longer steps and, more tokens spread, a lower max/mean. On max/mean alone the slope comes out
    negative (floored to 0: no change would ever pay); with the batch it is the busiest GPU's share again."""
    rng = np.random.default_rng(0)
    batches = rng.uniform(200.0, 800.0, 40)  # tokens a step
    imbalances = 1.05 + 30.0 / batches + rng.uniform(0, 0.02, 40)  # fewer tokens, a more uneven spread
    steps = 0.01 + 2e-5 * batches + 1e-5 * batches * imbalances
    assert fit_step_model(imbalances, steps).seconds_per_imbalance == 0.0
    fitted = fit_step_model(imbalances, steps, batches)
    assert fitted.seconds_per_imbalance == pytest.approx(1e-5 * batches.mean(), rel=1e-6)
    assert fitted.seconds(1.2) == pytest.approx(0.01 + 2e-5 * batches.mean() + 1e-5 * batches.mean() * 1.2)
    # a step that waits on the batch only (a latency-bound exchange): the busiest GPU buys nothing
    assert fit_step_model(imbalances, 0.01 + 3e-5 * batches, batches).seconds_per_imbalance == pytest.approx(0.0)
    # a batch that barely moves: the line in max/mean, as without it
    steady = np.full(40, 500.0)
    assert fit_step_model(imbalances, STEP.seconds(imbalances), steady) == fit_step_model(imbalances,
                                                                                          STEP.seconds(imbalances))
    # steeper than the whole step scaling with max/mean (a negative fixed part): capped there, the most a
    # placement can buy is max/mean now over planned
    steep = fit_step_model(imbalances, 1e-5 * batches * (imbalances - 1.0), batches)
    assert steep.fixed_seconds == 0.0 and steep.seconds_per_imbalance > 0
    assert price_change(ChangeQuote(1.3, 1.1, steep, 1.0, ChangeCost(0.0, "test"))).gain_share == pytest.approx(
        1.3 / 1.1 - 1)
    with pytest.raises(ValueError, match="tokens_per_step"):
        fit_step_model(imbalances, steps, batches[:3])


def test_every_engine_has_a_prior_and_a_restart_costs_more_than_a_rearrange():
    assert set(ENGINE_PRIORS) == {"bundled", "sglang", "vllm"}
    assert ENGINE_PRIORS["vllm"].stall_seconds == 0.91
    assert ENGINE_PRIORS["sglang"].stall_seconds > 60 * ENGINE_PRIORS["vllm"].stall_seconds
    assert all(c.source.startswith("prior: ") for c in ENGINE_PRIORS.values())
    # the bundled runtime's switch gathers each rank's slots from the weights it holds: no transfer between GPUs,
    # so it costs less than vLLM's rearrange, and its prior names the benchmark that timed it
    assert 0 < ENGINE_PRIORS["bundled"].stall_seconds < ENGINE_PRIORS["vllm"].stall_seconds
    assert "benchmarks/bundled_switch.py" in ENGINE_PRIORS["bundled"].source


def test_a_plan_for_a_lasting_hot_set_pays_and_one_chasing_a_passing_hot_set_does_not():
    """price_placement from what a pool's windows carry: two GPUs, experts 0 and 1 hot on GPU 0."""
    current = PlacementTable(np.array([[0, 1, 2, 3]]), None)  # GPU 0: experts 0, 1; GPU 1: experts 2, 3
    planned = PlacementTable(np.array([[0, 2, 1, 3]]), None)  # one hot expert on each GPU
    rng = np.random.default_rng(0)
    lasting = rng.poisson([[[1000.0, 1000.0, 100.0, 100.0]]] * 48).astype(float)  # [48, 1, 4]
    imbalances, steps = [1.8] * 48, [0.1] * 48
    price = price_placement(current, planned, lasting, imbalances, steps, ENGINE_PRIORS["vllm"], 5.0, num_gpus=2)
    assert price.is_paying and price.gain_share > 0.1
    # held over every minute of the 4 minutes seen, and believed for as long again: too short to pay a restart
    assert price.horizon_seconds == pytest.approx(5.0 * (48 - GAIN_WINDOWS + 1), rel=0.02)  # Poisson noise
    assert not price_placement(current, planned, lasting, imbalances, steps, ENGINE_PRIORS["sglang"], 5.0,
                               num_gpus=2).is_paying
    # the hot pair moves to another pair every window: the plan fits this minute's load no better than the one
    # in force, and the hot set does not last
    passing = np.stack([rng.permutation([1000.0, 1000.0, 100.0, 100.0])[None] for _ in range(48)])
    price = price_placement(current, planned, passing, imbalances, steps, ENGINE_PRIORS["vllm"], 5.0, num_gpus=2)
    assert not price.is_paying and price.horizon_seconds == 5.0
