"""An engine's /metrics over a window -> the rank row's serving counters (agents/adapters/serving.py): counters as
differences, gauges as the later read, TTFT/ITL percentiles from histogram bucket deltas, a restart as a fresh
start, and a page without a series every window needs refused with the series and version named."""

from __future__ import annotations

import pytest
from support.engines.pages import sglang_page

from agents.adapters.errors import EngineFormatError
from agents.adapters.histogram import quantile
from agents.adapters.prom_text import parse_metrics
from agents.adapters.serving import serving_fields
from agents.adapters.sglang.names import SERVING as SGLANG
from agents.adapters.vllm.names import SERVING as VLLM


def _read(text: str, at: float):
    return parse_metrics(text, engine="sglang", version="0.5.23", at=at)


def test_a_window_of_sglang_metrics():
    before = _read(sglang_page(prompt=1000, cached=200, ttft=(10, 20, 20)), 100.0)
    after = _read(sglang_page(prompt=5000, cached=1200, ttft=(10, 60, 70)), 110.0)
    fields = serving_fields(SGLANG, "0.5.23", before, after)
    assert (fields["requests_running"], fields["requests_waiting"]) == (3, 2)
    assert (fields["prefix_query_tokens"], fields["prefix_hit_tokens"]) == (4000, 1000)
    serving = fields["serving"]
    assert serving.prefill_tokens == 3000 and serving.num_prefilled == 50
    assert serving.kv_capacity_tokens == 8000 and serving.kv_tokens_mean == 2000
    assert serving.busy_seconds == pytest.approx(4.0)
    ttft = fields["ttft"]
    assert ttft.count == 50 and ttft.p50 == pytest.approx(0.1 + 0.9 * 25 / 40)  # 40 of 50 in (0.1, 1]
    assert ttft.p99 == 1.0  # in +Inf: its lower bound
    assert fields["spec_draft_tokens"] == 0  # SGLang exports acceptance as gauges only


def test_an_engine_restart_reads_as_a_fresh_start():
    before = _read(sglang_page(prompt=9000, cached=2000, ttft=(50, 90, 90)), 100.0)
    after = _read(sglang_page(prompt=300, cached=100, ttft=(1, 4, 4)), 110.0)
    fields = serving_fields(SGLANG, "0.5.23", before, after)
    assert fields["prefix_query_tokens"] == 300 and fields["ttft"].count == 4


def test_a_page_without_a_series_every_window_needs_is_refused_naming_it():
    page = sglang_page(prompt=1, cached=0, ttft=(0, 0, 0)).replace("sglang:num_queue_reqs", "sglang:queue_reqs")
    with pytest.raises(EngineFormatError) as refused:
        serving_fields(SGLANG, "0.5.23", _read(page, 1.0), _read(page, 2.0))
    assert str(refused.value).startswith("sglang 0.5.23: sglang:num_queue_reqs: missing from /metrics")


def test_a_page_that_is_not_prometheus_text_is_refused():
    with pytest.raises(EngineFormatError, match="vllm 0.34.0: /metrics"):
        parse_metrics("<html>502 Bad Gateway</html>\n{", engine="vllm", version="0.34.0")


def test_vllm_speculative_counters_and_accepted_by_position():
    def page(drafts: int, accepted: tuple[int, int]) -> str:
        lab = 'model_name="ds",engine="0"'
        return f"""vllm:num_requests_running{{{lab}}} 1
vllm:num_requests_waiting{{{lab}}} 0
vllm:spec_decode_num_drafts_total{{{lab}}} {drafts}
vllm:spec_decode_num_draft_tokens_total{{{lab}}} {drafts * 2}
vllm:spec_decode_num_accepted_tokens_total{{{lab}}} {sum(accepted)}
vllm:spec_decode_num_accepted_tokens_per_pos_total{{{lab},position="0"}} {accepted[0]}
vllm:spec_decode_num_accepted_tokens_per_pos_total{{{lab},position="1"}} {accepted[1]}
"""
    before = parse_metrics(page(10, (8, 5)), engine="vllm", version="0.34.0", at=1.0)
    after = parse_metrics(page(110, (90, 40)), engine="vllm", version="0.34.0", at=11.0)
    fields = serving_fields(VLLM, "0.34.0", before, after)
    assert (fields["spec_drafts"], fields["spec_draft_tokens"], fields["spec_accepted_tokens"]) == (100, 200, 117)
    assert fields["spec_accepted_by_position"] == [82, 35]


def test_quantile_interpolates_within_the_bucket():
    assert quantile(0.5, {1.0: 0, 2.0: 10, float("inf"): 10}) == pytest.approx(1.5)
    assert quantile(0.5, {1.0: 0, float("inf"): 0}) is None


def test_vllm_kv_tokens_from_its_usage_and_the_blocks_in_cache_config_infos_labels():
    """vLLM exports its KV usage as a fraction of num_gpu_blocks - 1 (one null block) per engine, and its blocks only
    as labels of `vllm:cache_config_info`: KV tokens are the used blocks x block_size, summed over engines; an
    engine whose labels do not say its blocks ("None") adds nothing."""
    def info(engine: str, blocks: str) -> str:
        return (f'vllm:cache_config_info{{block_size="16",cache_dtype="auto",engine="{engine}",'
                f'num_gpu_blocks="{blocks}"}} 1.0\n')

    page = ('vllm:num_requests_running{engine="0"} 3\nvllm:num_requests_waiting{engine="0"} 0\n'
            'vllm:kv_cache_usage_perc{engine="0"} 0.25\nvllm:kv_cache_usage_perc{engine="1"} 0.2\n'
            'vllm:kv_cache_usage_perc{engine="2"} 0.5\n' + info("0", "401") + info("1", "101") + info("2", "None"))
    read = parse_metrics(page, engine="vllm", version="0.32.0", at=2.0)
    serving = serving_fields(VLLM, "0.32.0", read, read)["serving"]
    assert serving.kv_capacity_tokens == (400 + 100) * 16
    assert serving.kv_tokens_mean == (100 + 20) * 16
