from dataclasses import dataclass, field

import torch
from torch import Tensor


@dataclass(slots=True)
class MoECounters:
    """Per-step MoE counters; tensors live on the engine's device and are filled without host syncs."""

    expert_tokens: Tensor  # [num_moe_layers, num_experts] (token, expert) assignments routed by this rank
    slot_tokens: Tensor  # [num_moe_layers, num_local_slots] rows processed by this rank's slots
    recall_kept: Tensor  # [num_moe_layers] unconstrained top-k assignments the limited router kept
    recall_total: Tensor  # [num_moe_layers] unconstrained top-k assignments
    dropped_tokens: Tensor  # [num_moe_layers] assignments dropped by a capacity limit
    dispatch_seconds: float = 0.0
    dispatch_exposed_seconds: float = 0.0
    combine_seconds: float = 0.0
    combine_exposed_seconds: float = 0.0
    # [num_moe_layers, top_k + 1] tokens this rank routed whose top-k reached 0, 1, .. top_k distinct expert
    # groups / nodes (moe_ops.reach); None: the engine does not count them
    groups_per_token: Tensor | None = None
    nodes_per_token: Tensor | None = None
    # the step-level straggler with and without the dispatch-time split (agents/runtime/replica_split.py), the same
    # on every rank (computed from the group's all-gathered counts); None: the engine does not gather them.
    # Sums over steps, [num_moe_layers]: the busiest GPU's tokens under the split, under the window's fixed shares,
    # the cut bound on any split (float64), and the group's token-expert assignments (the mean GPU times ep_size)
    split_max_tokens: Tensor | None = None
    shares_max_tokens: Tensor | None = None
    bound_max_tokens: Tensor | None = None
    group_tokens: Tensor | None = None
    is_split_routed: bool = False  # the step routed by the split (dispatch_split "on"), not by the fixed shares

    @classmethod
    def zeros(
        cls, num_layers: int, num_experts: int, num_local_slots: int, device, top_k: int | None = None,
        is_split_measured: bool = False,
    ) -> "MoECounters":
        """top_k: also count the groups and nodes each token reached; is_split_measured: the split's sums."""

        def z(*shape):
            return torch.zeros(*shape, dtype=torch.int64, device=device)

        return cls(
            z(num_layers, num_experts),
            z(num_layers, num_local_slots),
            z(num_layers),
            z(num_layers),
            z(num_layers),
            groups_per_token=None if top_k is None else z(num_layers, top_k + 1),
            nodes_per_token=None if top_k is None else z(num_layers, top_k + 1),
            split_max_tokens=z(num_layers) if is_split_measured else None,
            shares_max_tokens=z(num_layers) if is_split_measured else None,
            bound_max_tokens=torch.zeros(num_layers, dtype=torch.float64, device=device) if is_split_measured else None,
            group_tokens=z(num_layers) if is_split_measured else None,
        )


@dataclass(slots=True)
class RequestOutput:
    request_id: str
    new_token_ids: list[int]
    is_finished: bool
    finish_reason: str | None
    num_prompt_tokens: int
    num_cached_tokens: int
    num_output_tokens: int
    arrival_time: float
    first_scheduled_time: float | None
    first_token_time: float | None


@dataclass(slots=True)
class StepStats:
    step: int
    timestamp: float  # time.monotonic() at the end of the step; the clock of all *_time fields
    is_prefill: bool
    num_scheduled_tokens: int
    num_running: int
    num_waiting: int
    num_preempted: int
    kv_cache_usage: float
    forward_seconds: float
    step_seconds: float
    moe: MoECounters
    prefix_query_tokens: int = 0
    prefix_hit_tokens: int = 0
    spec_num_drafts: int = 0
    spec_draft_tokens: int = 0
    spec_accepted_tokens: int = 0
    spec_accepted_by_position: list[int] = field(default_factory=list)
    placement_version: int = 0
    routing_version: int = 0
    outputs: list[RequestOutput] = field(default_factory=list)
    # what the pool planner sizes pools from: prompt tokens computed this step (cache hits and drafts
    # excluded), prompt tokens waiting for admission, KV tokens held, and the rank's limits
    num_prefill_tokens: int = 0
    num_waiting_tokens: int = 0
    placement_switch_seconds: float | None = None  # this step switched placement, taking these seconds
    num_kv_tokens: int = 0
    kv_capacity_tokens: int = 0
    max_num_seqs: int = 0

    @property
    def all2all_seconds(self) -> float:
        return self.moe.dispatch_seconds + self.moe.combine_seconds

    @property
    def all2all_exposed_seconds(self) -> float:
        return self.moe.dispatch_exposed_seconds + self.moe.combine_exposed_seconds
