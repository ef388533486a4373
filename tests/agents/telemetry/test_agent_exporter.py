"""The exporter on a fresh registry: the names the dashboards use, constant labels, bounded series."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from support.agent_metrics import AGENT_METRIC_NAMES
from support.ranks import SIM_MODEL, identity
from support.step_stats import output, step

from agents.telemetry.exporter import Exporter
from agents.telemetry.latency import RequestTimer
from agents.telemetry.windows import WindowBuilder

LABELS = {"deployment": "tiny", "role": "decode", "ep_rank": "1"}


@pytest.fixture
def registry() -> CollectorRegistry:
    return CollectorRegistry()


@pytest.fixture
def exporter(registry) -> Exporter:
    return Exporter(registry, deployment="tiny", role="decode", ep_rank=1, num_layers=4, top_k=4,
                    num_speculative_tokens=2)


def test_a_step_moves_the_counters_gauges_and_histograms(registry, exporter):
    timer = RequestTimer()
    for i, now in enumerate((10.0, 10.2)):
        stats = step(i, now, outputs=[output("a", [1] * (i + 1), 1 + 2 * i, arrival=9.8, first=10.0)])
        exporter.observe_step(stats, timer.observe(stats))
    value = registry.get_sample_value
    assert value("moectl_prefix_cache_query_tokens_total", LABELS) == 64
    assert value("moectl_prefix_cache_hit_tokens_total", LABELS) == 32
    assert value("moectl_spec_decode_accepted_tokens_by_position_total", LABELS | {"position": "0"}) == 4
    assert value("moectl_spec_decode_accepted_tokens_by_position_total", LABELS | {"position": "1"}) == 2
    assert value("moectl_all2all_seconds_total", LABELS | {"phase": "dispatch"}) == pytest.approx(0.004)
    assert value("moectl_all2all_seconds_total", LABELS | {"phase": "combine"}) == pytest.approx(0.002)
    assert value("moectl_forward_seconds_total", LABELS) == pytest.approx(0.02)
    assert value("moectl_requests_running", LABELS) == 2 and value("moectl_requests_waiting", LABELS) == 1
    assert value("moectl_kv_cache_usage_ratio", LABELS) == 0.25
    assert value("moectl_time_to_first_token_seconds_count", LABELS) == 1
    assert value("moectl_time_to_first_token_seconds_sum", LABELS) == pytest.approx(0.2)
    assert value("moectl_inter_token_latency_seconds_count", LABELS) == 1
    assert value("moectl_inter_token_latency_seconds_sum", LABELS) == pytest.approx(0.1)
    assert value("moectl_generation_tokens_total", LABELS) == 3


def test_a_closed_window_sets_the_per_layer_load_ratio_and_received_tokens(registry, exporter):
    builder = WindowBuilder(identity(1, 2), SIM_MODEL, window_seconds=1.0, now=100.0)
    stats = step(0, 100.0, layer0=(30, 2))
    builder.add(stats, RequestTimer().observe(stats))
    exporter.observe_window(builder.roll(101.0))
    value = registry.get_sample_value
    assert value("moectl_expert_load_max_to_mean_ratio", LABELS | {"layer": "0"}) == pytest.approx(30 / (32 / 32))
    assert value("moectl_expert_load_max_to_mean_ratio", LABELS | {"layer": "1"}) == 0  # nothing routed: unset
    assert value("moectl_expert_received_tokens_total", LABELS) == 4 * 3
    assert value("moectl_routing_recall_ratio", LABELS) == pytest.approx(0.75)


def test_info_keeps_one_series_and_follows_the_placement_version(registry, exporter):
    exporter.set_info(gpu_uuid="GPU-1", node="n0", runtime="moectl-runtime", placement_version=0)
    exporter.set_info(gpu_uuid="GPU-1", node="n0", runtime="moectl-runtime", placement_version=3)
    text = generate_latest(registry).decode()
    info = [line for line in text.splitlines() if line.startswith("moectl_agent_info{")]
    assert len(info) == 1 and 'placement_version="3"' in info[0] and info[0].endswith(" 1.0")
    assert registry.get_sample_value("moectl_agent_placement_version", LABELS) == 3


def test_every_design_name_is_exported_with_bounded_labels(registry, exporter):
    exporter.set_info(gpu_uuid="", node="n0", runtime="sim", placement_version=0)
    text = generate_latest(registry).decode()
    names = {line.split("{")[0] for line in text.splitlines() if line and not line.startswith("#")}
    assert set(AGENT_METRIC_NAMES) <= names, set(AGENT_METRIC_NAMES) - names
    for line in text.splitlines():
        if line.startswith("moectl_") and "{" in line:
            labels = {kv.split("=")[0] for kv in line[line.index("{") + 1: line.rindex("}")].split(",")}
            assert {"deployment", "role", "ep_rank"} <= labels, line
            assert labels <= {"deployment", "role", "ep_rank", "phase", "position", "layer", "reason", "le",
                              "gpu_uuid", "node", "runtime", "placement_version"}, line


def test_groups_and_nodes_per_token_are_histograms_over_the_windows(registry, exporter):
    builder = WindowBuilder(identity(1, 2), SIM_MODEL, window_seconds=1.0, now=100.0)
    for now in (100.0, 101.0):
        stats = step(0, now, groups=[0, 1, 2, 1, 0], nodes=[1, 3, 0, 0, 0])  # 4 tokens per layer, 4 layers
        builder.add(stats, RequestTimer().observe(stats))
        exporter.observe_window(builder.roll(now + 1.0))
    value = registry.get_sample_value
    groups = [value("moectl_routing_groups_per_token_bucket", LABELS | {"le": le}) for le in ("1.0", "2.0", "3.0",
                                                                                                "4.0", "+Inf")]
    assert groups == [8, 24, 32, 32, 32]
    assert value("moectl_routing_groups_per_token_count", LABELS) == 32
    assert value("moectl_routing_groups_per_token_sum", LABELS) == 2 * 4 * (1 + 4 + 3)
    assert value("moectl_routing_nodes_per_token_bucket", LABELS | {"le": "1.0"}) == 32  # le=1 holds 0 too
    assert value("moectl_routing_nodes_per_token_sum", LABELS) == 2 * 4 * 3
