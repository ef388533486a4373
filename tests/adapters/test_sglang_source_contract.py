"""What the SGLang adapter relies on, read from the pinned SGLang wheel's source (agents/adapters/sglang/names.py).
The recorder, the loader and /server_info's fields also run as SGLang's code in test_sglang_dump.py,
test_sglang_location_file.py and test_sglang_server_check.py; these pin the rest: the HTTP paths, the dump's keys
and file name, the loader's accepted key, the metric names and the plugin entry-point group."""

from __future__ import annotations

import ast
import re

import pytest
from support.engines.wheels import source

from agents.adapters.sglang import live_plugin, names

SRT = "sglang/srt"


def _function_args(text: str, name: str) -> list[str]:
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.FunctionDef) and node.name == name:
            return [a.arg for a in node.args.args]
    raise AssertionError(f"{name} not found")


def test_the_recorder_endpoints_and_server_info():
    http = source("sglang", f"{SRT}/entrypoints/http_server.py")
    for path in (names.START_RECORD, names.DUMP_RECORD, names.SERVER_INFO):
        assert f'"{path}"' in http, path
    assert '"version": __version__' in http and '"startup_time"' in http


def test_a_stat_dump_has_the_keys_we_read_and_the_name_we_look_for():
    recorder = source("sglang", f"{SRT}/eplb/expert_distribution.py")
    stat = recorder[recorder.index("class _StatAccumulator"):recorder.index("class _Buffer")]
    assert re.findall(r"(\w+)=", stat[stat.index("output = dict("):stat.index("if output_mode")]) == \
        list(names.DUMP_KEYS)
    assert f'f"{names.DUMP_PREFIX}{{time.time()}}.pt"' in stat
    # a dump resets the buffer: why the sidecar refuses --enable-eplb (its manager dumps the same recorder)
    real = recorder[recorder.index("class _ExpertDistributionRecorderReal"):]
    dump = real[real.index("    def dump_record"):real.index("    @property\n    def recording")]
    assert "self._reset()" in dump
    assert names.RECORDER_DIR_ENV in source("sglang", f"{SRT}/environ.py")


def test_the_loader_takes_physical_to_logical_map_alone():
    loader = source("sglang", f"{SRT}/eplb/expert_location.py")
    assert _function_args(loader, "init_by_mapping") == ["model_config", names.LOCATION_KEY, "moe_ep_rank"]
    assert f'"{names.LOCATION_KEY}" in data_dict' in loader
    assert "**data_dict" in loader  # so any other key is a TypeError


@pytest.mark.parametrize("arg", [names.ARG_ENABLE_EPLB, names.ARG_RECORDER_MODE, names.ARG_BUFFER_SIZE,
                                 names.ARG_REDUNDANT, names.ARG_INIT_LOCATION])
def test_the_server_args_we_read(arg):
    assert re.search(rf"^\s+{arg}\s*:", source("sglang", f"{SRT}/arg_groups/fields/exec_.py"), re.M), arg


def test_the_metric_names_we_read():
    collector = source("sglang", f"{SRT}/observability/metrics_collector.py")
    serving = names.SERVING
    used = [serving.running, serving.waiting, serving.kv_usage, serving.kv_capacity, serving.prompt_tokens,
            serving.prefix_hits, serving.busy, serving.ttft, serving.itl, names.QUEUE_SECONDS]
    missing = [name for name in used if f'"{name}"' not in collector]
    assert missing == []


def test_the_plugin_entry_point_group_and_the_method_the_live_plugin_wraps():
    assert 'GENERAL_PLUGINS_GROUP = "sglang.srt.plugins"' in source("sglang", f"{SRT}/plugins/__init__.py")
    manager = source("sglang", f"{SRT}/eplb/eplb_manager.py")
    module, cls, method = live_plugin.TARGET.rsplit(".", 2)
    assert module == "sglang.srt.eplb.eplb_manager" and f"class {cls}" in manager
    assert _function_args(manager, method) == ["self", "logical_count"]  # then keyword-only broadcast_over_world
    assert f"self.{method}(" in manager and "update_expert_location_with_recovery(" in manager
