"""A post's additive share of its pool's window: counters and where its slot load goes. A post is one rank's
snapshot (moectl.v1) or one EP group's (moectl.v2, agents/protocol/group.py); both become one `Report`."""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence

from agents.protocol import Snapshot
from agents.protocol.grid import window_index
from agents.protocol.group import GroupSnapshot, RankRow
from controlplane.observed.report import COUNTERS, Report
from controlplane.observed.window import ACCEPTED_AT, GROUPS_AT, NODES_AT

# None where the agent does not measure them: summed over the rows that do, below
_OPTIONAL = ("balancer_events", "balancer_stall_seconds")
# ACCEPTED_AT, GROUPS_AT, NODES_AT (controlplane/observed/window.py) + n: accepted tokens at draft position n, tokens
# whose top-k reached n groups / nodes: summed like COUNTERS; the rest of COUNTERS are sent as they are
_FIELDS = tuple(name for name in COUNTERS if name in RankRow.model_fields and name not in _OPTIONAL)


def rank_counters(s: Snapshot | RankRow) -> dict[str, float]:
    """One rank's counters, from its v1 snapshot or its row of a group snapshot (the same fields)."""
    return group_counters([s])


def group_counters(rows: Sequence[Snapshot | RankRow]) -> dict[str, float]:
    """The ranks' counters added up (summed, or the worst for MAXIMA), field by field across the ranks: what
    `add_counters` over each rank's own would give, without a dict per rank (a 320-rank group's in about a
    millisecond)."""

    def total(values: Iterable[float]) -> float:
        return sum(values, 0.0)

    counters = {name: total(getattr(r, name) for r in rows) for name in _FIELDS}
    counters |= {
        "ttft_count": total(r.ttft.count for r in rows), "ttft_sum": total(r.ttft.sum for r in rows),
        "itl_count": total(r.itl.count for r in rows), "itl_sum": total(r.itl.sum for r in rows),
        "routing_recall_sum": total(r.routing_recall or 0.0 for r in rows),
        "routing_recall_count": total(int(r.routing_recall is not None) for r in rows),
        "ttft_p99": max(0.0, *(r.ttft.p99 or 0.0 for r in rows)),
        "itl_p99": max(0.0, *(r.itl.p99 or 0.0 for r in rows)),
    }
    watched = [r.balancer_events for r in rows if r.balancer_events is not None]
    if watched:  # the engine balancer's acts, where an adapter watches them (plan/balancer_watch.py)
        counters |= {"balancer_events": total(watched), "balancer_reports": float(len(watched))}
    timed = [(r.balancer_events or 0, r.balancer_stall_seconds) for r in rows
             if r.balancer_stall_seconds is not None]
    if timed:  # what the acts cost, from the rows that timed them (controlplane/observed/measured_cost.py)
        counters |= {"balancer_stall_seconds": total(s for _, s in timed),
                     "balancer_stall_events": total(n for n, _ in timed)}
    counters |= step_load_counters(rows)
    for prefix, name in ((ACCEPTED_AT, "spec_accepted_by_position"), (GROUPS_AT, "routing_groups_per_token"),
                         (NODES_AT, "routing_nodes_per_token")):
        by_position = itertools.zip_longest(*(getattr(r, name) for r in rows), fillvalue=0)
        counters |= {f"{prefix}{i}": total(values) for i, values in enumerate(by_position)}
    return counters


def step_load_counters(rows: Sequence[Snapshot | RankRow]) -> dict[str, float]:
    """The ranks' StepLoad sums as counters (none when no rank measured it, so a window without them reads as
    not measured rather than as balanced)."""
    loads = [r.step_load for r in rows if r.step_load is not None]
    if not loads:
        return {}
    return {"step_split_max_tokens": sum(s.split_max_tokens for s in loads),
            "step_shares_max_tokens": sum(s.shares_max_tokens for s in loads),
            "step_bound_max_tokens": sum(s.bound_max_tokens for s in loads),
            "step_mean_tokens": sum(s.mean_tokens for s in loads),
            "step_split_routed_mean_tokens": sum(s.mean_tokens for s in loads if s.is_split_routed)}


def to_report(snapshot: Snapshot, grid_seconds: float) -> Report:
    s = snapshot
    # the grid window holding the snapshot's start: every rank's window lands in the same row
    return Report(window_index(s.window_start, grid_seconds), s.expert_tokens.to_numpy(),
                  s.slot_tokens.to_numpy(), s.identity.rank * s.identity.slots_per_rank, rank_counters(s),
                  (s.placement_version,))


def to_group_report(group: GroupSnapshot, grid_seconds: float) -> Report:
    rows = sorted(group.ranks, key=lambda r: r.rank)
    return Report(window_index(group.window_start, grid_seconds), group.expert_tokens.to_numpy(),
                  group.slot_tokens.to_numpy(), 0, group_counters(rows),
                  tuple(r.placement_version for r in rows))


