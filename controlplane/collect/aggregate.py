"""A snapshot's additive share of its pool's window: counters and where its slot load goes."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from agents.protocol import Snapshot
from agents.protocol.grid import window_index
from controlplane.observed import ACCEPTED_AT, GROUPS_AT, NODES_AT

# summed over all reports of a window; ratios are formed at read time (sum/sum, never mean of ratios)
COUNTERS = (
    "num_steps", "forward_seconds", "dispatch_seconds", "combine_seconds",
    "prefix_query_tokens", "prefix_hit_tokens", "spec_drafts", "spec_draft_tokens", "spec_accepted_tokens",
    "requests_running", "requests_waiting", "ttft_count", "ttft_sum", "itl_count", "itl_sum",
    "routing_recall_sum", "routing_recall_count",
)
# worst over reports: a percentile cannot be summed, the max is an honest upper bound
MAXIMA = ("ttft_p99", "itl_p99")
# ACCEPTED_AT, GROUPS_AT, NODES_AT (controlplane/observed.py) + n: accepted tokens at draft position n, tokens
# whose top-k reached n groups / nodes: summed like COUNTERS


@dataclass(frozen=True)
class Report:
    """expert_tokens: [num_layers, num_experts]; slot_tokens: [num_layers, slots_per_rank] landing at
    slot columns `slot_offset..slot_offset + slots_per_rank` of the pool's table."""

    window_index: int
    expert_tokens: np.ndarray
    slot_tokens: np.ndarray
    slot_offset: int
    counters: dict[str, float]


def to_report(snapshot: Snapshot, grid_seconds: float) -> Report:
    s = snapshot
    counters = {name: float(getattr(s, name)) for name in COUNTERS if hasattr(s, name)}
    counters |= {
        "ttft_count": s.ttft.count, "ttft_sum": s.ttft.sum, "itl_count": s.itl.count, "itl_sum": s.itl.sum,
        "routing_recall_sum": s.routing_recall or 0.0, "routing_recall_count": int(s.routing_recall is not None),
        "ttft_p99": s.ttft.p99 or 0.0, "itl_p99": s.itl.p99 or 0.0,
    }
    counters |= {f"{ACCEPTED_AT}{i}": float(n) for i, n in enumerate(s.spec_accepted_by_position)}
    counters |= {f"{GROUPS_AT}{i}": float(n) for i, n in enumerate(s.routing_groups_per_token)}
    counters |= {f"{NODES_AT}{i}": float(n) for i, n in enumerate(s.routing_nodes_per_token)}
    # the grid window holding the snapshot's start: every rank's window lands in the same row
    return Report(window_index(s.window_start, grid_seconds), s.expert_tokens.to_numpy(),
                  s.slot_tokens.to_numpy(), s.identity.rank * s.identity.slots_per_rank, counters)


def merge_counters(total: dict[str, float], part: dict[str, float]) -> dict[str, float]:
    merged = dict(total)
    for name, value in part.items():
        merged[name] = max(merged.get(name, 0.0), value) if name in MAXIMA else merged.get(name, 0.0) + value
    return merged
