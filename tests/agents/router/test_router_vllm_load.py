"""The router's view of a vLLM rank (agents/router/upstream_vllm.py): its load read from vLLM's own /metrics text,
requests summed over its engines, the KV-cache usage their mean; a page that is not vLLM's is refused (the rank then
reads as unhealthy)."""

from __future__ import annotations

import pytest

from agents.router.upstream_vllm import load_of

PAGE = """# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="tiny"} 3.0
vllm:num_requests_running{engine="1",model_name="tiny"} 2.0
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="tiny"} 4.0
vllm:num_requests_waiting{engine="1",model_name="tiny"} 0.0
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="tiny"} 0.25
vllm:kv_cache_usage_perc{engine="1",model_name="tiny"} 0.125
"""


def test_requests_are_summed_over_the_servers_engines_and_the_kv_usage_is_their_mean():
    assert load_of(PAGE) == (5, 4, pytest.approx(0.1875))


def test_a_page_without_vllms_series_is_refused():
    with pytest.raises(KeyError, match="vllm:num_requests_waiting"):
        load_of(PAGE.replace("vllm:num_requests_waiting", "other"))
