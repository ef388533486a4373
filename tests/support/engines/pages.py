"""Engines' /metrics pages as prometheus_client writes them, with the series names the pinned sources define
(tests/adapters/test_sglang_source_contract.py checks them)."""

from __future__ import annotations

LABELS = 'model_name="ds",engine_type="unified",tp_rank="0",pp_rank="0",moe_ep_rank="0"'


def sglang_page(*, prompt: int, cached: int, ttft: tuple[int, int, int], running: int = 3, queue: int = 2) -> str:
    """SGLang's page as prometheus_client writes it (names as in tests/adapters/test_sglang_source_contract.py)."""
    le_01, le_1, inf = ttft
    return f"""# HELP sglang:num_running_reqs The number of running requests.
# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{{{LABELS}}} {running}
# TYPE sglang:num_queue_reqs gauge
sglang:num_queue_reqs{{{LABELS}}} {queue}
# TYPE sglang:token_usage gauge
sglang:token_usage{{{LABELS}}} 0.25
# TYPE sglang:max_total_num_tokens gauge
sglang:max_total_num_tokens{{{LABELS}}} 8000
# TYPE sglang:prompt_tokens counter
sglang:prompt_tokens_total{{{LABELS}}} {prompt}
# TYPE sglang:cached_tokens counter
sglang:cached_tokens_total{{{LABELS},cache_source="device"}} {cached}
# TYPE sglang:forward_execution_seconds counter
sglang:forward_execution_seconds_total{{{LABELS}}} {prompt / 1000}
# TYPE sglang:time_to_first_token_seconds histogram
sglang:time_to_first_token_seconds_bucket{{{LABELS},le="0.1"}} {le_01}
sglang:time_to_first_token_seconds_bucket{{{LABELS},le="1.0"}} {le_1}
sglang:time_to_first_token_seconds_bucket{{{LABELS},le="+Inf"}} {inf}
sglang:time_to_first_token_seconds_count{{{LABELS}}} {inf}
sglang:time_to_first_token_seconds_sum{{{LABELS}}} {inf * 0.3}
"""
