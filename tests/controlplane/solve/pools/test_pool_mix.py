"""The prefill pool sized from the routers' prompt-length mix (controlplane/solve/pools/load.py remote_mix,
pool_capacity.py predict_prefill): the same mean prompt, a different mix, a different pool."""

from __future__ import annotations

from dataclasses import replace

import pytest
from support.pools import model, view, window
from support.serving_windows import prompt_buckets

from controlplane.solve.pools.capacity import LoadForecast, PromptMix
from controlplane.solve.pools.load import measured_load, remote_mix
from controlplane.solve.pools.planner import plan_pools
from controlplane.solve.pools.rules import PoolRules

SHORT = PromptMix((1200.0,), (1.0,))  # every prompt 1200 tokens
LONG = PromptMix((600.0, 7800.0), (11 / 12, 1 / 12))  # the same mean, one in twelve prompts 7800 tokens


def load(rate: float, mix: PromptMix | None) -> LoadForecast:
    return LoadForecast(rate, 0.8, 1200.0, 300.0, 200.0, 300.0, "test", is_backtested=True, remote_mix=mix)


BY_MIX = PoolRules()
CEILING = PoolRules(size_prefill_by_mix=False)


def planned_prefill(mix: PromptMix | None, rules: PoolRules = BY_MIX) -> int:
    windows = [window(t) for t in range(130, 181, 10)]
    return plan_pools(view(windows), model(), load(10.0, mix), load(30.0, mix), rules).target("prefill")


def test_a_short_mix_needs_fewer_prefill_replicas_than_the_ceiling_and_a_long_one_more():
    ceiling = planned_prefill(None)  # only the mean known: planned under the 0.7 utilisation ceiling
    assert planned_prefill(SHORT) < ceiling < planned_prefill(LONG)
    # with the mix turned off: the same mean, the same pool
    assert planned_prefill(SHORT, CEILING) == planned_prefill(LONG, CEILING) == ceiling


def test_the_long_prompts_tail_is_what_costs_replicas():
    lean = PoolRules(ttft_tail_percentile=None)
    assert planned_prefill(SHORT, lean) < planned_prefill(LONG, lean)  # the mix's queue alone
    assert planned_prefill(LONG, lean) < planned_prefill(LONG)  # and its longest prompts' wait



def test_the_mix_leaves_the_shortest_prompts_to_the_decode_pool_and_keeps_the_measured_mean():
    # 100 arrivals a window: 40 of <= 128 tokens, 40 of 513..1024, 20 of 4097..8192; 30% prefilled locally
    counts = prompt_buckets(b1=40, b4=40, b7=20)
    mean = 1500.0
    windows = [window(t, local_share=0.3, prompt_buckets=counts, mean_input_tokens=mean) for t in range(10, 401, 10)]
    mix = remote_mix(tuple(windows), 0.7)
    assert sum(mix.shares) == pytest.approx(1.0)
    # the 30 shortest are all in the first bucket: the remote mix is 10 of it, 40 and 20 of the others
    assert mix.shares == pytest.approx((10 / 70, 40 / 70, 20 / 70))
    assert mix.tokens[0] < 128 < 512 < mix.tokens[1] < 1024 < 4096 < mix.tokens[2] < 8192
    # over all arrivals the bucket lengths average to the measured mean prompt
    whole = remote_mix(tuple(windows), 1.0)
    assert sum(t * s for t, s in zip(whole.tokens, whole.shares, strict=True)) == pytest.approx(mean)


def test_no_mix_unless_every_window_it_reads_counted_lengths():
    counts = prompt_buckets(b4=100)  # 100 arrivals a window: MIX_ARRIVALS takes the last 30
    windows = [window(t, prompt_buckets=counts) for t in range(10, 401, 10)]
    assert measured_load(tuple(windows)).remote_mix is not None
    newest_without = windows[:-1] + [replace(windows[-1], prompt_buckets=None)]
    assert measured_load(tuple(newest_without)).remote_mix is None
    oldest_without = [replace(windows[0], prompt_buckets=None)] + windows[1:]  # older than the mix reads
    assert measured_load(tuple(oldest_without)).remote_mix is not None


def test_one_replica_is_a_single_queue_that_a_long_prompt_holds_up():
    # two prefill replicas at 2 req/s: the mean prompt alone says one is enough (a fifth of one's capacity); by
    # default, knowing that one prompt in twelve is 7800 tokens, the pool keeps two: on one replica every prompt
    # behind a long one waits for it (benchmarks/results/pools-2026-11-30.md, Run 9: the night of a whole day)
    windows = [window(t, rate=2.0) for t in range(130, 181, 10)]

    def prefill(mix: PromptMix, rules: PoolRules) -> int:
        return plan_pools(view(windows, prefill=2), model(), load(2.0, mix), load(2.0, mix), rules).target("prefill")

    assert prefill(LONG, CEILING) == 1
    assert prefill(LONG, BY_MIX) == 2
    assert prefill(SHORT, BY_MIX) == 1  # prompts of one length: one replica carries them
