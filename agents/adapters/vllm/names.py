"""vLLM's names, as its pinned release spells them (checked against the wheel's source by
tests/adapters/test_vllm_source_contract.py): plugin groups, the policy registry, metrics."""

from __future__ import annotations

from agents.adapters.serving import ServingNames

PINNED_VERSION = "0.34.0"
# the vLLM versions the plugins install into: 0.32.0 runs in the live tests (tests/adapters/test_vllm_live.py),
# 0.34.0's source is read by tests/adapters/test_vllm_source_contract.py; any other is refused (counting.py)
SUPPORTED_VERSIONS = ("0.32.0", PINNED_VERSION)

GENERAL_PLUGINS = "vllm.general_plugins"
ENDPOINT_PLUGINS = "vllm.endpoint_plugins"
POLICY_MODULE = "vllm.distributed.eplb.policy"  # EPLB_POLICIES = {"default": DefaultEplbPolicy}
POLICY_REGISTRY = "EPLB_POLICIES"
POLICY_NAME = "default"  # EPLBConfig.policy is Literal["default"]: the entry the plugin wraps
POLICY_ARGS = ("weight", "num_replicas", "num_groups", "num_nodes", "num_ranks", "old_global_expert_indices")

SERVING = ServingNames(
    engine="vllm", running="vllm:num_requests_running", waiting="vllm:num_requests_waiting",
    kv_usage="vllm:kv_cache_usage_perc", kv_capacity="",  # a fraction (0..1) per engine, despite its name
    kv_blocks_info="vllm:cache_config_info",  # CacheConfig as labels: num_gpu_blocks, block_size, per engine
    prompt_tokens="vllm:prompt_tokens_total", prefix_queries="vllm:prefix_cache_queries_total",
    prefix_hits="vllm:prefix_cache_hits_total", busy="",  # no forward-time counter
    ttft="vllm:time_to_first_token_seconds", itl="vllm:inter_token_latency_seconds",
    spec_drafts="vllm:spec_decode_num_drafts_total", spec_draft_tokens="vllm:spec_decode_num_draft_tokens_total",
    spec_accepted="vllm:spec_decode_num_accepted_tokens_total",
    spec_accepted_by_position="vllm:spec_decode_num_accepted_tokens_per_pos_total",
)

LOAD_PATH = "/moectl/v1/load"
PLACEMENT_PATH = "/moectl/v1/placement"
STATE_DIR_ENV = "MOECTL_VLLM_STATE_DIR"  # shared by vLLM's processes (a volume shared by every node's, multi-node)
TOKEN_ENV = "MOECTL_VLLM_TOKEN"  # the bearer token the endpoint asks of whoever posts a placement
COUNTS_PATH = "/moectl/v1/expert-counts"  # every worker's cumulative per-expert counts (count_route.py)
COUNTING_ENV = "MOECTL_VLLM_COUNTING"  # "0": no per-expert counting in the workers
COUNT_SECONDS_ENV = "MOECTL_VLLM_COUNT_SECONDS"  # how often a worker hands its counts over (default 1 s)
