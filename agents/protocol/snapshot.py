"""`moectl.v1`: one rank's snapshot of one window, posted to `POST /v1/agents/snapshot`.

An agent posts one `Snapshot` per window and gets a `DesiredState` back in the response, so one round trip both
reports and reconciles. Its per-rank counters (`RankCounters`) are also what a `moectl.v2` group snapshot carries
for each of its ranks (agents/protocol/group.py).
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, field_validator, model_serializer, model_validator

from agents.protocol.array import Array, check_counts
from agents.protocol.identity import Identity, ModelShape
from agents.protocol.running import RunningPlacement, without_absent_table
from agents.protocol.wire import (
    MAX_COUNT,
    MAX_SECONDS,
    MAX_VERSION,
    PROTOCOL_VERSION,
    LatencySummary,
    _Count,
    _Frozen,
    _Seconds,
    known_protocol,
)

MAX_TOP_K = 64  # routed experts per token a per-token histogram has room for (DeepSeek-V3 routes 8)
_Counts = list[Annotated[int, Field(ge=0, le=MAX_COUNT)]]


class ServingCounters(_Frozen):
    """One rank's serving work over a window: what the pool planner sizes pools from
    (controlplane/plan/pools.py). Means are time-weighted over the window, idle time included; "at the
    window's end" values are the last step's."""

    busy_seconds: float = Field(default=0.0, ge=0, allow_inf_nan=False, description="time inside steps that ran work")
    prefill_tokens: int = Field(default=0, ge=0, description="prompt tokens computed here (prefix-cache hits excluded)")
    num_prefilled: int = Field(default=0, ge=0, description="requests whose prefill finished here")
    queued_tokens: int = Field(default=0, ge=0, description="prompt tokens waiting for admission at the window's end")
    num_waiting: int = Field(default=0, ge=0, description="requests not admitted at the window's end: no KV room or "
                                                          "batch slot (hand-offs not yet imported included)")
    batch_mean: float = Field(default=0.0, ge=0, allow_inf_nan=False, description="sequences running, mean")
    kv_tokens_mean: float = Field(default=0.0, ge=0, allow_inf_nan=False, description="KV tokens held, mean")
    kv_capacity_tokens: int = Field(default=0, ge=0, description="KV tokens this rank can hold")
    max_batch: int = Field(default=0, ge=0, description="sequences this rank batches at most")


class StepLoad(_Frozen):
    """The busiest GPU of every MoE step of a window, with the dispatch-time split (agents/protocol/replica_split.py)
    and with the window's fixed shares, from the same per-step counts. Sums over the window's steps and MoE layers,
    in tokens; the ratio of a max to `mean_tokens` is the step-level straggler factor (token-weighted over steps and
    layers: an MoE step lasts as long as its busiest GPU). The ranks of a group gather the same counts, so each
    reports the group's numbers."""

    is_split_routed: bool = Field(description="the ranks routed by the split: split_max_tokens was measured and "
                                              "shares_max_tokens is the counterfactual; false: the reverse")
    split_max_tokens: float = Field(ge=0, allow_inf_nan=False, description="the busiest GPU's tokens, split")
    shares_max_tokens: float = Field(ge=0, allow_inf_nan=False, description="the same under the fixed shares")
    bound_max_tokens: float = Field(ge=0, allow_inf_nan=False,
                                    description="the per-step LP bound: no split of the same counts does better")
    mean_tokens: float = Field(ge=0, allow_inf_nan=False, description="the mean GPU's tokens")


class RankCounters(_Frozen):
    """One rank's counters over one window: the placement it ran, its steps, time split, prefix cache, MTP,
    requests, latencies, routing reach and serving work."""

    placement_version: int = Field(ge=0, le=MAX_VERSION, description="the placement this rank ran at the window's end, "
                                   "which its slot_tokens were counted under")
    num_steps: int = _Count
    forward_seconds: float = _Seconds
    dispatch_seconds: float = _Seconds
    combine_seconds: float = _Seconds
    prefix_query_tokens: int = _Count
    prefix_hit_tokens: int = _Count
    spec_drafts: int = _Count
    spec_draft_tokens: int = _Count
    spec_accepted_tokens: int = _Count
    spec_accepted_by_position: _Counts = Field(default=[], max_length=16,
                                               description="accepted draft tokens at draft position 0, 1, ...")
    requests_running: int = _Count
    requests_waiting: int = _Count
    ttft: LatencySummary = LatencySummary()
    itl: LatencySummary = LatencySummary()
    routing_recall: float | None = Field(default=None, ge=0, le=1, allow_inf_nan=False)
    # optional (agents before them omit them): what a group limit bounds, measured as the router ran
    routing_groups_per_token: _Counts = Field(
        default=[], max_length=MAX_TOP_K + 1,
        description="tokens (summed over MoE layers) whose top-k experts reached 0, 1, 2, .. top_k distinct "
                    "expert groups; []: not measured")
    routing_nodes_per_token: _Counts = Field(
        default=[], max_length=MAX_TOP_K + 1,
        description="the same by distinct nodes (EP ranks grouped by gpus_per_node) holding the chosen replicas")
    serving: ServingCounters | None = Field(default=None, description="serving work for the pool planner; "
                                                                      "absent from agents that do not measure it")
    step_load: StepLoad | None = Field(default=None, description="the step-level straggler with and without the "
                                                                 "dispatch-time split; absent unless it is measured")
    # optional (agents before it omit it: 0)
    dropped_tokens: int = Field(default=0, ge=0, le=MAX_COUNT,
                                description="token-expert assignments (summed over MoE layers) the per-expert capacity "
                                            "limit (RoutingLimits.expert_capacity_factor) dropped")
    # optional (added 2026-12-06; absent: the adapter does not watch the engine's balancer)
    balancer_events: int | None = Field(default=None, ge=0, le=MAX_COUNT,
                                        description="times the engine's own balancer acted in the window (vLLM: "
                                                    "EPLB rearranges recorded; the bundled runtime: placement "
                                                    "switches); sent by one rank of a group")
    balancer_stall_seconds: float | None = Field(
        default=None, ge=0, le=MAX_SECONDS, allow_inf_nan=False,
        description="seconds those acts took from serving, summed (the bundled runtime: its placement switches, "
                    "timed); absent: not measured")

    @model_serializer(mode="wrap")
    def _omit_absent_counters(self, handler):  # noqa: ANN001
        return without_absent_counters(handler(self), self)

    def _where(self) -> str:
        """What names this rank in an error message that is not about this rank alone."""
        return ""

    @model_validator(mode="after")
    def _check_counters(self) -> RankCounters:
        where = self._where()
        if self.prefix_hit_tokens > self.prefix_query_tokens:
            raise ValueError(f"{where}prefix_hit_tokens exceeds prefix_query_tokens")
        if self.spec_accepted_tokens > self.spec_draft_tokens:
            raise ValueError(f"{where}spec_accepted_tokens exceeds spec_draft_tokens")
        if sum(self.spec_accepted_by_position) > self.spec_accepted_tokens:
            raise ValueError(f"{where}spec_accepted_by_position must be counts that sum to at most "
                             f"spec_accepted_tokens")
        return self

    def check_per_token(self, top_k: int) -> None:
        """The routing reach histograms against the model's top_k; raises ValueError."""
        histograms = {"routing_groups_per_token": self.routing_groups_per_token,
                      "routing_nodes_per_token": self.routing_nodes_per_token}
        for name, counts in histograms.items():
            if len(counts) > top_k + 1:
                raise ValueError(f"{self._where()}{name} has {len(counts)} bins; a token's top_k={top_k} experts "
                                 f"reach at most {top_k}, so at most {top_k + 1} bins (0..top_k)")
        groups, nodes = self.routing_groups_per_token, self.routing_nodes_per_token
        if groups and nodes and sum(groups) != sum(nodes):
            raise ValueError(f"{self._where()}routing_groups_per_token counts {sum(groups)} tokens, "
                             f"routing_nodes_per_token {sum(nodes)}: both count every token routed")


def without_absent_counters(data: object, counters: RankCounters) -> object:
    """Serialized counters without the optional fields they do not carry: they then read exactly as before those
    fields existed, since controllers that predate them forbid them."""
    for name in ("balancer_events", "balancer_stall_seconds"):
        if getattr(counters, name) is None and isinstance(data, dict):
            data.pop(name, None)
    return data


class Snapshot(RankCounters):
    """One rank's counters over one window.

    expert_tokens: [num_layers, num_experts] tokens this rank's router sent to each logical expert.
    slot_tokens:   [num_layers, slots_per_rank] tokens this rank's expert slots processed under
                   placement_version. A window that switched tables counts its slots from the switch on.
    """

    protocol: Literal["moectl.v1"] = PROTOCOL_VERSION
    identity: Identity
    model: ModelShape
    window_start: float = Field(gt=0, allow_inf_nan=False, description="unix seconds")
    window_seconds: float = Field(gt=0, le=3600, allow_inf_nan=False)
    expert_tokens: Array
    slot_tokens: Array
    running_placement: RunningPlacement | None = Field(
        default=None, description="the table placement_version names; sent only after a PLACEMENT_UNKNOWN refusal")

    @model_serializer(mode="wrap")
    def _omit_absent_table(self, handler):  # noqa: ANN001
        return without_absent_counters(without_absent_table(handler(self), self.running_placement), self)

    @field_validator("protocol", mode="before")
    @classmethod
    def _known_protocol(cls, value: object) -> object:
        if value == "moectl.v2":
            raise ValueError("protocol 'moectl.v2' is a group snapshot: post it to /v2/agents/snapshot")
        return known_protocol(value)

    @model_validator(mode="after")
    def _check(self) -> Snapshot:
        m, ident = self.model, self.identity
        check_counts("expert_tokens", self.expert_tokens, (m.num_layers, m.num_experts))
        check_counts("slot_tokens", self.slot_tokens, (m.num_layers, ident.slots_per_rank))
        if ident.ep_size * ident.slots_per_rank < m.num_experts:
            raise ValueError(f"ep_size x slots_per_rank = {ident.ep_size * ident.slots_per_rank} slots "
                             f"cannot hold {m.num_experts} experts")
        if self.running_placement is not None:
            self.running_placement.check(m.num_layers, m.num_experts, ident.ep_size * ident.slots_per_rank)
        self.check_per_token(m.top_k)
        return self
