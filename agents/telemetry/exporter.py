"""Step stats and closed windows -> Prometheus metrics (the names dashboards/ queries), on a registry
passed in.

Every series carries the constant labels `deployment`, `role`, `ep_rank`; the only other labels are
small enums (`phase`, `position`, `layer`, `reason`). No expert id is ever a label: the full
[layer, expert] matrix travels in the snapshot, not here. Counters of MoE arrays move once per
window (when the engine's device counters come to the host), everything else once per step.
"""

from __future__ import annotations

import numpy as np
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from agents.runtime.stats import StepStats
from agents.telemetry.buckets import ITL_BUCKETS, TTFT_BUCKETS
from agents.telemetry.count_histogram import CountHistogram
from agents.telemetry.latency import LatencySamples
from agents.telemetry.windows import ClosedWindow

CONSTANT_LABELS = ("deployment", "role", "ep_rank")
REQUEST_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0,
                   240.0, 480.0, 960.0, 1920.0, 7680.0)
REPORT_FAILURE_REASONS = ("connect", "timeout", "http_4xx", "http_retry", "http_5xx", "queue_full", "invalid_answer",
                          "apply", "placement_unknown")

# attribute, type, exposed name, help, extra labels, histogram buckets
METRICS = (
    ("prefix_query", Counter, "moectl_prefix_cache_query_tokens_total",
     "Prompt tokens looked up in the prefix cache (counted once, at admission)", (), None),
    ("prefix_hit", Counter, "moectl_prefix_cache_hit_tokens_total",
     "Prompt tokens served from the prefix cache", (), None),
    ("spec_drafts", Counter, "moectl_spec_decode_drafts_total", "MTP draft verifications", (), None),
    ("spec_draft_tokens", Counter, "moectl_spec_decode_draft_tokens_total", "MTP draft tokens proposed", (),
     None),
    ("spec_accepted", Counter, "moectl_spec_decode_accepted_tokens_total", "MTP draft tokens accepted", (),
     None),
    ("spec_accepted_by_position", Counter, "moectl_spec_decode_accepted_tokens_by_position_total",
     "MTP draft tokens accepted, by draft position", ("position",), None),
    ("all2all", Counter, "moectl_all2all_seconds_total",
     "Seconds in expert-parallel all-to-all, in flight (overlapped or not)", ("phase",), None),
    ("all2all_exposed", Counter, "moectl_all2all_exposed_seconds_total",
     "Seconds of all-to-all that compute did not hide", ("phase",), None),
    ("forward", Counter, "moectl_forward_seconds_total", "Seconds in model forward passes", (), None),
    ("steps", Counter, "moectl_forward_steps_total", "Engine steps that ran a forward pass", (), None),
    ("generation_tokens", Counter, "moectl_generation_tokens_total", "Tokens generated", (), None),
    ("preemptions", Counter, "moectl_num_preemptions_total", "Requests preempted for KV space", (), None),
    ("received", Counter, "moectl_expert_received_tokens_total",
     "Token-expert rows this rank's expert slots processed, over all MoE layers", (), None),
    ("dropped", Counter, "moectl_expert_dropped_tokens_total",
     "Token-expert assignments dropped by a per-expert capacity limit", (), None),
    ("load_ratio", Gauge, "moectl_expert_load_max_to_mean_ratio",
     "Hottest logical expert / mean expert, of the tokens this rank routed in the last window", ("layer",),
     None),
    ("gpu_load_ratio", Gauge, "moectl_expert_gpu_load_max_to_mean_ratio",
     "Busiest GPU over the mean GPU of the EP group under the current placement, as this rank's routing "
     "loads them; mean over MoE layers, last window", (), None),
    ("recall", Gauge, "moectl_routing_recall_ratio",
     "Share of the unconstrained top-k experts the group-limited router kept, last window", (), None),
    ("running", Gauge, "moectl_requests_running", "Requests being generated", (), None),
    ("waiting", Gauge, "moectl_requests_waiting", "Requests waiting to be scheduled", (), None),
    ("kv_usage", Gauge, "moectl_kv_cache_usage_ratio", "Share of KV-cache blocks in use", (), None),
    ("ttft", Histogram, "moectl_time_to_first_token_seconds", "Arrival to first token", (), TTFT_BUCKETS),
    ("itl", Histogram, "moectl_inter_token_latency_seconds", "Time between tokens of a request", (),
     ITL_BUCKETS),
    ("queue", Histogram, "moectl_request_queue_seconds", "Arrival to first scheduled", (), REQUEST_BUCKETS),
    ("snapshots", Counter, "moectl_agent_snapshots_total", "Windows the controller accepted", (), None),
    ("report_failures", Counter, "moectl_agent_report_failures_total",
     "Snapshot posts or desired-state applies that failed, by reason", ("reason",), None),
    ("placement_version", Gauge, "moectl_agent_placement_version", "Placement version this rank runs", (),
     None),
)
INFO_LABELS = ("gpu_uuid", "node", "runtime", "placement_version")


class Exporter:
    """The agent's metrics for one rank. One exporter per registry (one registry per process)."""

    def __init__(self, registry: CollectorRegistry, *, deployment: str, role: str, ep_rank: int,
                 num_layers: int, top_k: int, num_speculative_tokens: int = 0):
        const = {"deployment": deployment, "role": role, "ep_rank": str(ep_rank)}
        self._families = {}
        for attr, kind, name, doc, extra, buckets in METRICS:
            kwargs = {"buckets": buckets} if buckets else {}
            family = kind(name, doc, [*CONSTANT_LABELS, *extra], registry=registry, **kwargs)
            self._families[attr] = family
            if not extra:
                setattr(self, attr, family.labels(**const))
        self.const = const
        # pre-created children: a series exists (at 0) before its first event, so rate() works at once
        self.all2all_by_phase = {p: self._families["all2all"].labels(**const, phase=p) for p in ("dispatch", "combine")}
        self.exposed_by_phase = {p: self._families["all2all_exposed"].labels(**const, phase=p)
                                 for p in ("dispatch", "combine")}
        self.accepted_by_position = [self._families["spec_accepted_by_position"].labels(**const, position=str(i))
                                     for i in range(num_speculative_tokens)]
        self.load_ratio_by_layer = [self._families["load_ratio"].labels(**const, layer=str(i))
                                    for i in range(num_layers)]
        self.failures = {r: self._families["report_failures"].labels(**const, reason=r)
                         for r in REPORT_FAILURE_REASONS}
        # what a group limit bounds: a correct limited router never puts a token past topk_group groups
        self.groups_per_token = CountHistogram(
            registry, "moectl_routing_groups_per_token",
            "Distinct expert groups each token's top-k experts reached, per token and MoE layer", const, top_k)
        self.nodes_per_token = CountHistogram(
            registry, "moectl_routing_nodes_per_token",
            "Distinct nodes holding the expert replicas each token reached, per token and MoE layer", const, top_k)
        self.info = Gauge("moectl_agent_info", "Join labels for this rank (value 1)",
                          [*CONSTANT_LABELS, *INFO_LABELS], registry=registry)
        self._info_labels: dict[str, str] | None = None

    def observe_step(self, stats: StepStats, samples: LatencySamples) -> None:
        moe = stats.moe
        self.prefix_query.inc(stats.prefix_query_tokens)
        self.prefix_hit.inc(stats.prefix_hit_tokens)
        self.spec_drafts.inc(stats.spec_num_drafts)
        self.spec_draft_tokens.inc(stats.spec_draft_tokens)
        self.spec_accepted.inc(stats.spec_accepted_tokens)
        for position, count in enumerate(stats.spec_accepted_by_position):
            if count:
                self._accepted_child(position).inc(count)
        self.all2all_by_phase["dispatch"].inc(moe.dispatch_seconds)
        self.all2all_by_phase["combine"].inc(moe.combine_seconds)
        self.exposed_by_phase["dispatch"].inc(moe.dispatch_exposed_seconds)
        self.exposed_by_phase["combine"].inc(moe.combine_exposed_seconds)
        if stats.forward_seconds > 0:
            self.forward.inc(stats.forward_seconds)
            self.steps.inc()
        self.generation_tokens.inc(sum(len(out.new_token_ids) for out in stats.outputs))
        self.preemptions.inc(stats.num_preempted)
        self.running.set(stats.num_running)
        self.waiting.set(stats.num_waiting)
        self.kv_usage.set(stats.kv_cache_usage)
        for value in samples.ttft:
            self.ttft.observe(value)
        for value in samples.itl:
            self.itl.observe(value)
        for value in samples.queue:
            self.queue.observe(value)

    def observe_window(self, window: ClosedWindow, gpu_load_ratio: float | None = None) -> None:
        if gpu_load_ratio is not None:
            self.gpu_load_ratio.set(gpu_load_ratio)
        self.received.inc(int(window.slot_tokens.sum()))
        self.dropped.inc(window.num_dropped_tokens)
        tokens = window.expert_tokens.astype(np.float64)  # [num_layers, num_experts]
        means = tokens.mean(axis=1)
        for layer, child in enumerate(self.load_ratio_by_layer):
            if means[layer] > 0:  # a layer that routed nothing keeps its last value: missing is not 1.0
                child.set(float(tokens[layer].max() / means[layer]))
        if window.snapshot.routing_recall is not None:
            self.recall.set(window.snapshot.routing_recall)
        self.groups_per_token.add(window.snapshot.routing_groups_per_token)
        self.nodes_per_token.add(window.snapshot.routing_nodes_per_token)

    def set_info(self, *, gpu_uuid: str, node: str, runtime: str, placement_version: int) -> None:
        labels = {"gpu_uuid": gpu_uuid, "node": node, "runtime": runtime, "placement_version": str(placement_version)}
        if labels == self._info_labels:
            return
        if self._info_labels is not None:  # one info series per rank: the old version's series goes
            self.info.remove(*self.const.values(), *self._info_labels.values())
        self.info.labels(**self.const, **labels).set(1)
        self._info_labels = labels
        self.placement_version.set(placement_version)

    def report_failure(self, reason: str) -> None:
        self.failures[reason if reason in self.failures else "apply"].inc()

    def _accepted_child(self, position: int):
        while len(self.accepted_by_position) <= position:
            self.accepted_by_position.append(self._families["spec_accepted_by_position"].labels(
                **self.const, position=str(len(self.accepted_by_position))))
        return self.accepted_by_position[position]
