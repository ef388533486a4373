"""The metric names every agent exports, whatever its engine: the dashboards (dashboards/grafana/,
dashboards/prometheus/) are built on them."""

AGENT_METRIC_NAMES = [
    "moectl_prefix_cache_query_tokens_total", "moectl_prefix_cache_hit_tokens_total",
    "moectl_spec_decode_drafts_total", "moectl_spec_decode_draft_tokens_total",
    "moectl_spec_decode_accepted_tokens_total", "moectl_spec_decode_accepted_tokens_by_position_total",
    "moectl_all2all_seconds_total", "moectl_forward_seconds_total", "moectl_expert_received_tokens_total",
    "moectl_expert_load_max_to_mean_ratio", "moectl_routing_recall_ratio", "moectl_requests_running",
    "moectl_requests_waiting", "moectl_kv_cache_usage_ratio", "moectl_time_to_first_token_seconds_bucket",
    "moectl_inter_token_latency_seconds_bucket", "moectl_request_queue_seconds_bucket", "moectl_agent_info",
    "moectl_routing_groups_per_token_bucket", "moectl_routing_nodes_per_token_bucket",
]
