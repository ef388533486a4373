"""A post's additive share of its pool's load window (`Report`), and how the counters of a window add up."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# summed over all reports of a window; ratios are formed at read time (sum/sum, never mean of ratios)
COUNTERS = (
    "num_steps", "forward_seconds", "dispatch_seconds", "combine_seconds",
    "prefix_query_tokens", "prefix_hit_tokens", "spec_drafts", "spec_draft_tokens", "spec_accepted_tokens",
    "requests_running", "requests_waiting", "ttft_count", "ttft_sum", "itl_count", "itl_sum",
    "routing_recall_sum", "routing_recall_count",
    # the step-level straggler with and without the dispatch-time split (agents/protocol/snapshot.py StepLoad),
    # tokens summed over steps and MoE layers; only from agents that measure it
    "step_split_max_tokens", "step_shares_max_tokens", "step_bound_max_tokens", "step_mean_tokens",
    "step_split_routed_mean_tokens",
    # assignments the per-expert capacity limit dropped, summed over MoE layers (agents/protocol/snapshot.py)
    "dropped_tokens",
    # the engine balancer's acts (vLLM's rearranges) and the reports that counted them, only from adapters that
    # watch it (agents/protocol/snapshot.py balancer_events; controlplane/plan/balancer_watch.py)
    "balancer_events", "balancer_reports",
    # what those acts took from serving, summed, and the acts that were timed (a change's measured cost)
    "balancer_stall_seconds", "balancer_stall_events",
)
# worst over reports: a percentile cannot be summed, the max is an honest upper bound
MAXIMA = ("ttft_p99", "itl_p99")


@dataclass(frozen=True)
class Report:
    """expert_tokens: [num_layers, num_experts], summed over the post's ranks; slot_tokens: [num_layers,
    num_ranks * slots_per_rank] landing at slot columns `slot_offset..` of the pool's table; rank_versions: the
    placement version each of its ranks ran, in rank order from rank `slot_offset // slots_per_rank`."""

    window_index: int
    expert_tokens: np.ndarray
    slot_tokens: np.ndarray
    slot_offset: int
    counters: dict[str, float]
    rank_versions: tuple[int, ...] = (0,)

    @property
    def slots_per_rank(self) -> int:
        return self.slot_tokens.shape[1] // len(self.rank_versions)

    @property
    def first_rank(self) -> int:
        return self.slot_offset // self.slots_per_rank


def merge_counters(total: dict[str, float], part: dict[str, float]) -> dict[str, float]:
    return add_counters(dict(total), part)


def add_counters(total: dict[str, float], *parts: dict[str, float]) -> dict[str, float]:
    """Adds `parts` into `total` (summed, or the worst for MAXIMA) and returns it."""
    for part in parts:
        for name, value in part.items():
            total[name] = max(total.get(name, 0.0), value) if name in MAXIMA else total.get(name, 0.0) + value
    return total
