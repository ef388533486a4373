"""What the vLLM adapter relies on, read from the pinned vLLM wheel's source (agents/adapters/vllm/names.py):
the policy registry and signature, the plugin entry-point groups and the endpoint plugin's protocol, and the metric
names. vLLM's default policy itself runs in test_vllm_policy.py (loaded from the same wheel)."""

from __future__ import annotations

import ast

from support.engines.wheels import source

from agents.adapters.vllm import names

EPLB = "vllm/distributed/eplb"


def _method(text: str, cls: str, name: str) -> ast.FunctionDef:
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.ClassDef) and node.name == cls:
            functions = (n for n in node.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef))
            return next(n for n in functions if n.name == name)
    raise AssertionError(f"{cls} not found")


def test_the_registry_the_plugin_replaces_and_where_vllm_reads_it():
    assert f'{names.POLICY_REGISTRY} = {{"{names.POLICY_NAME}": DefaultEplbPolicy}}' in \
        source("vllm", f"{EPLB}/policy/__init__.py")
    state = source("vllm", f"{EPLB}/eplb_state.py")
    assert f"self.policy = {names.POLICY_REGISTRY}[policy_type]" in state  # looked up per model, after plugins load
    assert 'EPLBPolicyOption = Literal["default"]' in source("vllm", "vllm/config/parallel.py")


def test_the_policy_signature():
    method = _method(source("vllm", f"{EPLB}/policy/abstract.py"), "AbstractEplbPolicy", "rebalance_experts")
    assert tuple(a.arg for a in method.args.args) == ("cls", *names.POLICY_ARGS)


def test_the_plugin_groups_and_the_endpoint_protocol():
    plugins = source("vllm", "vllm/plugins/__init__.py")
    assert f'DEFAULT_PLUGINS_GROUP = "{names.GENERAL_PLUGINS}"' in plugins
    assert f'ENDPOINT_PLUGINS_GROUP = "{names.ENDPOINT_PLUGINS}"' in plugins
    interface = source("vllm", "vllm/plugins/endpoint_plugins/interface.py")
    for member in ("attach_router", "init_state"):
        _method(interface, "EndpointPlugin", member)
    assert "    name: str" in interface and "    required_tasks:" in interface


def test_the_metric_names_we_read():
    text = source("vllm", "vllm/v1/metrics/loggers.py") + source("vllm", "vllm/v1/spec_decode/metrics.py")
    serving = names.SERVING
    used = [serving.running, serving.waiting, serving.kv_usage, serving.prompt_tokens, serving.prefix_queries,
            serving.prefix_hits, serving.ttft, serving.itl, serving.spec_drafts, serving.spec_draft_tokens,
            serving.spec_accepted, serving.spec_accepted_by_position]
    # prometheus_client adds `_total` to a counter's name on the page: the source names it without
    missing = [name for name in used if f'"{name.removesuffix("_total")}"' not in text]
    assert missing == []


def test_the_kv_cache_blocks_we_read_from_cache_config_infos_labels():
    """The KV tokens held are usage x (num_gpu_blocks - 1) x block_size (agents/adapters/serving.py): the info
    gauge's labels are CacheConfig's fields, those two among them, and the usage excludes one null block."""
    loggers = source("vllm", "vllm/v1/metrics/loggers.py")
    assert f'name = "{names.SERVING.kv_blocks_info}"' in loggers and 'metrics_info["engine"] = str(engine_index)' in \
        loggers
    cache = source("vllm", "vllm/config/cache.py")
    assert "return {key: str(value) for key, value in self.__dict__.items()}" in cache
    assert "\n    block_size:" in cache and "\n    num_gpu_blocks:" in cache
    usage = ast.get_source_segment(pool := source("vllm", "vllm/v1/core/block_pool.py"),
                                   _method(pool, "BlockPool", "get_usage"))
    assert "total_gpu_blocks = self.num_gpu_blocks - 1" in usage
    assert "return 1.0 - (self.get_num_free_blocks() / total_gpu_blocks)" in usage


def test_what_the_expert_counter_wraps():
    """expert_counts.py wraps BaseRouter._apply_eplb_mapping (its argument: the logical top-k ids, after routing and
    before EPLB's mapping) and tags routers in MoERunner.__init__ with its layer_id; the same in the 0.32.0 that runs
    in test_vllm_live.py, read here in the pinned 0.34.0."""
    router = source("vllm", "vllm/model_executor/layers/fused_moe/router/base_router.py")
    select = ast.get_source_segment(router, _method(router, "BaseRouter", "_select_experts"))
    assert select.index("self._compute_routing(") < select.index("topk_ids = self._apply_eplb_mapping(topk_ids)")
    assert [a.arg for a in _method(router, "BaseRouter", "_apply_eplb_mapping").args.args] == ["self", "topk_ids"]
    assert "self.global_num_experts = global_num_experts" in router
    runner = source("vllm", "vllm/model_executor/layers/fused_moe/runner/moe_runner.py")
    assert _method(runner, "MoERunner", "layer_id") and "self.router = router" in runner
    assert "0.32.0" in names.SUPPORTED_VERSIONS and names.PINNED_VERSION in names.SUPPORTED_VERSIONS
