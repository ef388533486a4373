"""The pool planner's rules (controlplane/solve/pools/planner.py), on a latency model with known coefficients.

Numbers: the model (tests/support/pools.py) prefills 8000 tokens/s per replica; at 10 req/s (960 prompt
tokens/s per req/s on the prefill pool) two prefill replicas keep TTFT p90 at 0.5 s; 30 req/s needs 5
prefill and 6 decode replicas within the plan margins.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from support.pools import latency, model, view, window

from controlplane.observed.serving import PoolWindow
from controlplane.solve.pools.capacity import LoadForecast, replicas_needed
from controlplane.solve.pools.decision import DecisionKind, PoolDecision
from controlplane.solve.pools.planner import is_predictive_tick, plan_pools
from controlplane.solve.pools.rules import PoolRules
from controlplane.solve.pools.view import SloTarget

TTFT = (SloTarget("ttft", 90, 1.0), SloTarget("ttft", 99, 2.0))


def load(rate: float, hold: float | None = None, backtested: bool = True) -> LoadForecast:
    return LoadForecast(rate, 0.8, 1200.0, 300.0, 200.0, 300.0, "test", is_backtested=backtested, hold_rate=hold)


def windows(until: float, **kwargs) -> list:
    return [window(t, **kwargs) for t in range(int(until) - 50, int(until) + 1, 10)]


def test_predictive_tick_is_a_grid_of_the_interval():
    assert is_predictive_tick(180.0, 10.0, 180.0) and is_predictive_tick(365.0, 10.0, 180.0)
    assert not is_predictive_tick(190.0, 10.0, 180.0)


def test_capacity_matches_the_worked_numbers():
    assert replicas_needed("prefill", model(), load(10.0), TTFT, 0.8, 16)[0] == 2
    assert replicas_needed("prefill", model(), load(30.0), TTFT, 0.8, 16)[0] == 5
    itl = (SloTarget("itl", 90, 0.05),)
    assert replicas_needed("decode", model(), load(30.0), itl, 0.9, 16)[0] == 6


def test_scale_up_on_forecast_jumps_to_what_the_forecast_needs():
    plan = plan_pools(view(windows(180)), model(), load(10.0), load(30.0))
    for role, expected in (("prefill", 6), ("decode", 6)):
        decision = plan.decision(role)
        assert (decision.kind, decision.target) == (DecisionKind.predictive, expected), decision.reason
        assert "forecast 30.0 req/s" in decision.reason
        assert decision.predicted.replicas == expected
        assert decision.predicted.seconds <= decision.predicted.target_seconds


def test_no_forecast_between_ticks_keeps_the_pools():
    plan = plan_pools(view(windows(190)), model(), load(10.0), None)
    assert [d.kind for d in plan.decisions] == [DecisionKind.keep, DecisionKind.keep]
    assert plan.threshold is None  # the threshold moves on predictive ticks only


def test_reactive_step_on_a_sustained_breach_adds_one_replica():
    plan = plan_pools(view(windows(190, ttft=1.3)), model(), load(10.0), None)
    prefill = plan.decision("prefill")
    assert (prefill.kind, prefill.target) == (DecisionKind.reactive, 3), prefill.reason
    assert "measured ttft_p90 1.300s > 1.000s" in prefill.reason
    assert plan.decision("decode").direction == 0


def test_one_window_slightly_over_is_noise_but_far_over_is_not():
    slightly = windows(180) + [window(190, ttft=1.05)]
    assert plan_pools(view(slightly), model(), load(10.0), None).decision("prefill").direction == 0
    far = windows(180) + [window(190, ttft=1.6)]
    assert plan_pools(view(far), model(), load(10.0), None).decision("prefill").target == 3


def test_itl_breach_adds_a_decode_replica():
    plan = plan_pools(view(windows(190, itl=0.06)), model(), load(10.0), None)
    assert (plan.decision("decode").kind, plan.decision("decode").target) == (DecisionKind.reactive, 4)


def _cold_decode(end: float, warm_itl: float) -> PoolWindow:
    """A window whose pool-wide ITL p90 is 0.06 s over the 0.05 s target, one decode replica in its first window."""
    healthy = window(end, itl=0.06)
    replicas = tuple(replace(r, age_windows=0, itl=latency(0.1)) if r.replica == "d0" else
                     replace(r, itl=latency(warm_itl)) if r.role == "decode" else r for r in healthy.replicas)
    return replace(healthy, replicas=replicas)


def test_itl_breach_of_warming_replicas_alone_adds_no_decode_replica():
    # warm replicas within target: the breach ends when d0 is warm, before a replica asked for now serves
    cold = plan_pools(view([_cold_decode(t, 0.03) for t in range(140, 191, 10)]), model(), load(10.0), None)
    assert cold.decision("decode").direction == 0, cold.decision("decode").reason
    # warm replicas over target too: a capacity shortage, one more replica
    short = plan_pools(view([_cold_decode(t, 0.06) for t in range(140, 191, 10)]), model(), load(10.0), None)
    assert (short.decision("decode").kind, short.decision("decode").target) == (DecisionKind.reactive, 4)


def test_ttft_breach_with_decode_short_of_kv_room_is_decode_s():
    slow = windows(190, ttft=1.3, waiting=5)
    fast_prefill = [replace(w, replicas=tuple(replace(r, ttft=window(0, ttft=0.5).ttft) if r.role == "prefill"
                                              else r for r in w.replicas)) for w in slow]
    plan = plan_pools(view(fast_prefill), model(), load(10.0), None)
    assert plan.decision("decode").target == 4 and plan.decision("prefill").direction == 0


def test_a_breach_waits_for_a_replica_already_starting():
    plan = plan_pools(view(windows(190, ttft=1.3), starting={"prefill": 1}), model(), load(10.0), None)
    assert plan.decision("prefill").kind == DecisionKind.hold
    assert "already starting" in plan.decision("prefill").reason


def test_load_above_what_the_pool_carries_scales_before_any_breach():
    plan = plan_pools(view(windows(190)), model(), load(30.0), None)
    prefill = plan.decision("prefill")
    assert prefill.kind == DecisionKind.reactive and prefill.target == 3  # +50 % of 2, bounded
    assert "needs 6" in prefill.reason


def test_scale_down_only_when_load_times_n_over_n_minus_one_meets_the_slo():
    # at a hold rate of 14 req/s two replicas would run past the utilisation ceiling, three carry it
    plan = plan_pools(view(windows(180), prefill=4), model(), load(10.0), load(10.0, hold=14.0))
    prefill = plan.decision("prefill")
    assert (prefill.kind, prefill.target) == (DecisionKind.consolidate, 3), prefill.reason
    assert "load x 4/3" in prefill.reason and prefill.predicted.replicas == 3
    # the same, but the load may come back within the cooldown: 3 replicas would not meet the margin
    refused = plan_pools(view(windows(180), prefill=4), model(), load(10.0), load(10.0, hold=22.0))
    assert refused.decision("prefill").direction == 0
    assert "consolidation to 3 refused" in refused.decision("prefill").reason


def test_no_scale_down_on_a_forecast_too_short_to_backtest():
    plan = plan_pools(view(windows(180), prefill=4), model(), load(10.0), load(10.0, backtested=False))
    assert plan.decision("prefill").direction == 0
    assert "too little history" in plan.decision("prefill").reason


@pytest.mark.parametrize("since, expected_kind", [(100.0, DecisionKind.hold), (400.0, DecisionKind.reactive)])
def test_no_reversal_of_direction_within_the_cooldown(since, expected_kind):
    down = PoolDecision(190.0 - since, "decode", 4, 3, DecisionKind.consolidate, "earlier")
    plan = plan_pools(view(windows(190, itl=0.06), history=[down]), model(), load(10.0), None)
    decision = plan.decision("decode")
    assert decision.kind == expected_kind, decision.reason
    if expected_kind == DecisionKind.hold:
        assert decision.target == decision.current and "no reversal within 300s" in decision.reason


def test_no_scale_down_within_the_cooldown_of_a_scale_up():
    up = PoolDecision(100.0, "prefill", 3, 4, DecisionKind.reactive, "earlier")
    plan = plan_pools(view(windows(180), prefill=4, history=[up]), model(), load(10.0), load(10.0, hold=10.0))
    assert plan.decision("prefill").kind == DecisionKind.hold


@pytest.mark.parametrize("latest, reason", [
    (window(120.0), "stale"),  # 60 s old at now = 180
    (window(180.0, num_arrivals=None), "arrivals not measured"),
    (replace(window(180.0), itl=None), "not measured"),
])
def test_hold_on_stale_or_missing_data(latest, reason):
    plan = plan_pools(view(windows(170) + [latest], now=180.0), model(), load(10.0), load(30.0))
    assert all(d.kind == DecisionKind.hold and d.direction == 0 for d in plan.decisions)
    assert reason in plan.decisions[0].reason


def test_zero_arrivals_is_a_measurement_not_missing_data():
    quiet = windows(170) + [window(180.0, rate=0.0)]
    plan = plan_pools(view(quiet), model(), load(10.0), load(30.0))
    assert plan.decision("prefill").kind == DecisionKind.predictive


def test_a_pool_whose_replicas_did_not_report_holds():
    partial = windows(180, num_decode=1)  # 1 of 3 ready decode replicas reported
    plan = plan_pools(view(partial), model(), load(10.0), load(30.0))
    assert plan.decision("decode").kind == DecisionKind.hold and "1 of 3" in plan.decision("decode").reason
    assert plan.decision("prefill").kind == DecisionKind.predictive


def test_without_a_model_only_measured_breaches_move_a_pool():
    assert plan_pools(view(windows(180)), None, load(10.0), load(30.0)).changes == ()
    assert plan_pools(view(windows(190, ttft=1.3)), None, load(10.0), None).decision("prefill").target == 3


def test_budget_cuts_by_marginal_benefit():
    # 5 prefill (1 GPU) + 6 decode (2 GPUs) = 17 GPUs wanted, 14 allowed: each pool keeps what it has
    # (2 + 3 x 2 = 8 GPUs); of the 6 left, prefill takes two replicas (at 2 and 3 it cannot carry 30 req/s,
    # at 4 its TTFT is at 1.6 x target), then decode two (at 5 it is at 1.5 x, at 6 it would fit), since
    # a fifth prefill replica (down to 0.7 x) buys less per GPU than the decode ones.
    curve_only = PoolRules(max_prefill_utilisation=0.97)  # the worked numbers above are the TTFT curve's
    plan = plan_pools(view(windows(180), budget=14), model(), load(10.0), load(30.0), curve_only)
    assert all(d.kind == DecisionKind.budget and "GPU budget 14" in d.reason for d in plan.decisions)
    assert (plan.target("prefill"), plan.target("decode")) == (4, 5)


def test_rules_are_configurable():
    rules = PoolRules(predictive_interval_seconds=60.0)
    assert plan_pools(view(windows(240)), model(), load(10.0), load(30.0), rules).decision("prefill").target == 6
    curve_only = PoolRules(predictive_interval_seconds=60.0, max_prefill_utilisation=0.97)
    assert plan_pools(view(windows(240)), model(), load(10.0), load(30.0), curve_only).target("prefill") == 5


def test_prefill_is_planned_under_its_utilisation_ceiling():
    # 25 req/s: 24000 prompt tokens/s; the TTFT curve is met by 4 replicas (0.75 busy), the ceiling needs 5
    assert replicas_needed("prefill", model(), load(25.0), TTFT, 0.8, 16)[0] == 4
    assert replicas_needed("prefill", model().with_prefill_limits(0.7, None), load(25.0), TTFT, 0.8, 16)[0] == 5
    plan = plan_pools(view(windows(180)), model(), load(10.0), load(25.0))
    assert plan.target("prefill") == 5


def test_consolidation_takes_the_fewest_replicas_that_carry_the_load():
    # 6 prefill replicas, a step of at most 2: at a hold rate of 25 req/s, 4 replicas would run past the 0.7
    # utilisation ceiling, 5 carry it within the consolidate margin, so the pool goes to 5 (not kept at 6)
    plan = plan_pools(view(windows(180, num_prefill=6), prefill=6), model(), load(10.0), load(10.0, hold=25.0))
    prefill = plan.decision("prefill")
    assert (prefill.kind, prefill.target) == (DecisionKind.consolidate, 5), prefill.reason
    assert "load x 6/5" in prefill.reason


def queued(w, tokens: float):
    """`w` with `tokens` prompt tokens queued on each prefill replica at its end."""
    return replace(w, replicas=tuple(replace(r, queued_tokens=tokens) if r.role == "prefill" else r
                                     for r in w.replicas))


def test_a_growing_backlog_is_sized_for_when_new_replicas_serve():
    # the same queue (200 prompts) at the latest window: steady since the window before, or grown from none
    # in it (20 prompts/s more than the pool serves, for the 120 s new replicas take to start)
    rules = PoolRules(max_reactive_share=3.0)
    base = windows(180, ttft=1.3)
    steady = base[:-2] + [queued(base[-2], 120_000.0), queued(window(190, ttft=1.3), 120_000.0)]
    growing = base[:-1] + [queued(window(190, ttft=1.3), 120_000.0)]
    sized = {name: plan_pools(view(ws), model(), load(10.0), None, rules).decision("prefill")
             for name, ws in (("steady", steady), ("growing", growing))}
    assert all(d.kind == DecisionKind.reactive for d in sized.values())
    assert sized["growing"].target > sized["steady"].target >= 3, (sized["growing"].reason, sized["steady"].reason)
    # replicas already asked for 100 s ago serve in 20 s: the backlog grows only until then
    up = PoolDecision(90.0, "prefill", 2, 3, DecisionKind.reactive, "earlier")
    started = plan_pools(view(growing, prefill=2, starting={"prefill": 1}, history=[up]), model(), load(10.0), None,
                         rules).decision("prefill")
    assert started.target < sized["growing"].target, started.reason


def test_a_decode_scale_up_keeps_its_warming_replicas_within_the_itl_bound():
    # 30 req/s while the new replicas warm up: 6 decode replicas meet the targets warm (batch 39, ITL p99 47 ms),
    # but a new one fills to that batch at once and runs 2x slower (94 ms > the 80 ms bound); at 7 (batch 25,
    # 35 ms) it stays within
    forecast = replace(load(30.0), warm_rate=30.0)
    decode = plan_pools(view(windows(180)), model(), load(10.0), forecast).decision("decode")
    assert decode.target == 7 and "warming up (2x slower)" in decode.reason, decode.reason
    plain = plan_pools(view(windows(180)), model(), load(10.0), forecast, PoolRules(cold_slowdown=1.0))
    assert plain.target("decode") == 6


@pytest.mark.parametrize("sure, is_scaled", [(11.25, False), (12.4, True)])
def test_the_load_now_must_need_more_replicas_at_the_rate_it_surely_is(sure, is_scaled):
    # 12.5 req/s needs a third prefill replica (two carry 11.7 under the utilisation ceiling); counted from 100
    # arrivals it may be 10% less (11.25), from 10000 only 1%
    now = replace(load(12.5), sure_rate=sure)
    prefill = plan_pools(view(windows(190, rate=12.5)), model(), now, None).decision("prefill")
    assert (prefill.target == 3) == is_scaled, prefill.reason


def test_scale_down_must_carry_the_last_bursts_rate():
    # the forecast holds at 10 req/s (4 -> 3 is safe there, as above), but a burst to 22 req/s was measured
    # within the last 600 s: 3 replicas would not carry it, and bursts recur, so the pool keeps 4
    burst = [window(t, rate=22.0 if 120 < t <= 180 else 10.0) for t in range(10, 541, 10)]
    plan = plan_pools(view(burst, prefill=4), model(), load(10.0), load(10.0, hold=10.0))
    assert plan.decision("prefill").direction == 0
    assert "refused" in plan.decision("prefill").reason and "22.0 req/s burst" in plan.decision("prefill").reason
    # the same burst longer ago than the burst memory: down to the 2 that carry 10 req/s
    older = [window(t, rate=22.0 if 60 < t <= 120 else 10.0) for t in range(10, 1081, 10)]
    plan = plan_pools(view(older, prefill=4), model(), load(10.0), load(10.0, hold=10.0))
    assert plan.decision("prefill").target == 2, plan.decision("prefill").reason
    # a smooth fall from 22 req/s (a day's evening) is no burst: down to 2 as well
    falling = [window(t, rate=22.0 - 12.0 * min(t, 360) / 360) for t in range(10, 541, 10)]
    plan = plan_pools(view(falling, prefill=4), model(), load(10.0), load(10.0, hold=10.0))
    assert plan.decision("prefill").target == 2, plan.decision("prefill").reason


@pytest.mark.parametrize("down_at, up_at, up_rate, is_refused", [
    (-500.0, -200.0, 10.0, True),  # undone 300 s after it, at a load below the one it would carry now (14 req/s)
    (-500.0, -200.0, 16.0, False),  # undone at 16 req/s: 14 is under 0.9 x 16, a load it has not failed at
    (-1500.0, -200.0, 10.0, False),  # the scale-up came 1300 s later: the load rose, the consolidation held
    (-4000.0, -3700.0, 10.0, False),  # undone over an hour ago: forgotten
])
def test_a_consolidation_undone_is_not_made_again_at_the_load_that_undid_it(down_at, up_at, up_rate, is_refused):
    history = [PoolDecision(down_at, "prefill", 4, 3, DecisionKind.consolidate, "load x 4/3 keeps ..."),
               PoolDecision(up_at, "prefill", 3, 4, DecisionKind.reactive, "measured ttft_p90 > target",
                            request_rate=up_rate)]
    plan = plan_pools(view(windows(180), prefill=4, history=history), model(), load(10.0), load(10.0, hold=14.0))
    prefill = plan.decision("prefill")
    if is_refused:
        assert prefill.direction == 0 and "a scale-down to 3 was undone 380s ago at 10.0 req/s" in prefill.reason
    else:
        assert (prefill.kind, prefill.target) == (DecisionKind.consolidate, 3), prefill.reason


def test_every_decision_carries_the_rate_it_was_sized_for():
    plan = plan_pools(view(windows(180), prefill=4), model(), load(10.0), load(10.0, hold=14.0))
    assert plan.decision("prefill").request_rate == pytest.approx(14.0)  # the hold rate a scale-down carries
    assert plan.decision("decode").request_rate is not None
