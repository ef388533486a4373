"""SGLang's names, as its pinned release spells them (checked against the wheel's source by
tests/adapters/test_sglang_source_contract.py): metrics, recorder endpoints, dump keys, server args."""

from __future__ import annotations

from agents.adapters.serving import ServingNames

PINNED_VERSION = "0.5.23"

SERVING = ServingNames(
    engine="sglang", running="sglang:num_running_reqs", waiting="sglang:num_queue_reqs",
    kv_usage="sglang:token_usage", kv_capacity="sglang:max_total_num_tokens",
    prompt_tokens="sglang:prompt_tokens_total", prefix_queries="sglang:prompt_tokens_total",
    prefix_hits="sglang:cached_tokens_total", busy="sglang:forward_execution_seconds_total",
    ttft="sglang:time_to_first_token_seconds", itl="sglang:inter_token_latency_seconds",
    # speculative decoding: SGLang exports acceptance as gauges (spec_accept_rate, spec_accept_length), not
    # the counts a window sums, so the row leaves spec_* at 0 rather than invent counts
)
QUEUE_SECONDS = "sglang:queue_time_seconds"

START_RECORD = "/start_expert_distribution_record"
DUMP_RECORD = "/dump_expert_distribution_record"
SERVER_INFO = "/server_info"

DUMP_PREFIX = "expert_distribution_recorder_"  # rank 0 writes <prefix><time.time()>.pt in the recorder dir
DUMP_KEYS = ("rank", "logical_count", "average_utilization_rate_over_window")
RECORDER_DIR_ENV = "SGLANG_EXPERT_DISTRIBUTION_RECORDER_DIR"
LOCATION_KEY = "physical_to_logical_map"  # the only key init_by_mapping accepts beside the model config

# /server_info fields the sidecar reads (the resolved server args, flattened there)
ARG_ENABLE_EPLB = "enable_eplb"
ARG_RECORDER_MODE = "expert_distribution_recorder_mode"
ARG_BUFFER_SIZE = "expert_distribution_recorder_buffer_size"
ARG_EP_SIZE = "ep_size"
ARG_REDUNDANT = "ep_num_redundant_experts"
ARG_INIT_LOCATION = "init_expert_location"
