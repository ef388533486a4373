"""Is the group limit in force honoured? Pure: a pool's windows in, a verdict with its evidence out.

Group-limited routing keeps each token's top-k experts inside `topk_group` expert groups (and so, with
groups placed on nodes, inside as many nodes). The seeds' incident: a code path silently bypassed it,
every token's experts spread over all GPUs, and throughput halved with nothing failing. Agents count, per
window, the tokens whose top-k reached 0, 1, .. top_k groups and nodes (agents/runtime/moe_ops.py `reach`).
A limited router never puts a token past the limit, so tokens past it mean the limit is not in effect.
The only honest ones are steps that ran just before a tighter limit reached every rank, which
SETTLE_WINDOWS and MAX_OVER_LIMIT_SHARE leave out.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from controlplane.desired import Mode, Policy
from controlplane.observed.pool import PoolState
from controlplane.observed.window import GROUPS_AT, NODES_AT, Window

MAX_OVER_LIMIT_SHARE = 0.01  # tokens past the limit a window may hold before it counts as not honouring it
# a limit is judged on windows starting a window or more after it changed: agents take it on their first report
# after the change, which ends the window holding it, so the next window may still start under the old one
SETTLE_WINDOWS = 1


@dataclass(frozen=True)
class WindowReach:
    """One window's groups and nodes per token (over its ranks and MoE layers)."""

    index: int
    num_tokens: int
    groups_mean: float
    groups_max: int
    nodes_mean: float | None  # None: no rank reported nodes
    nodes_max: int | None
    over_limit_share: float  # tokens whose top-k reached more groups than the limit; 0 without a limit

    def evidence(self) -> dict:
        return {"window": self.index, "tokens": self.num_tokens, "groups_mean": round(self.groups_mean, 3),
                "groups_max": self.groups_max, "over_limit_share": round(self.over_limit_share, 4),
                "nodes_mean": None if self.nodes_mean is None else round(self.nodes_mean, 3),
                "nodes_max": self.nodes_max}


@dataclass(frozen=True)
class RoutingReach:
    """The verdict on a pool's routing limit, with the windows it read (oldest first)."""

    deployment: str
    role: str
    limit: int | None  # groups per token in force: the issued limit, else the model's own; None: no limit
    windows: tuple[WindowReach, ...]
    is_violated: bool
    reason: str

    @property
    def last(self) -> WindowReach | None:
        return self.windows[-1] if self.windows else None

    def evidence(self) -> dict:
        """What the diagnosis records: the limit and each judged window's numbers."""
        return {"topk_group": self.limit, "windows": [w.index for w in self.windows],
                "per_window": [w.evidence() for w in self.windows], "max_over_limit_share": MAX_OVER_LIMIT_SHARE}


def window_reach(window: Window, limit: int | None) -> WindowReach | None:
    """None when the window carries no measure (agents before it) or no token."""
    groups, nodes = window.per_token(GROUPS_AT), window.per_token(NODES_AT)
    num_tokens = 0 if groups is None else int(groups.sum())
    if num_tokens == 0:
        return None
    values = np.arange(len(groups))
    over = groups[limit + 1:].sum() / num_tokens if limit is not None else 0.0
    has_nodes = nodes is not None and nodes.sum() > 0
    return WindowReach(
        index=window.index, num_tokens=num_tokens, groups_mean=float(groups @ values / num_tokens),
        groups_max=int(values[groups > 0].max()),
        nodes_mean=float(nodes @ np.arange(len(nodes)) / nodes.sum()) if has_nodes else None,
        nodes_max=int(np.flatnonzero(nodes).max()) if has_nodes else None, over_limit_share=float(over))


def check_routing_limit(policy: Policy, pool: PoolState) -> RoutingReach:
    """Violated when each of the last `sustained_windows` measured windows under the limit in force put more
    than MAX_OVER_LIMIT_SHARE of its tokens past it."""
    limit: int | None = pool.effective_topk_group
    if limit >= min(pool.num_groups, pool.top_k):
        limit = None  # top_k experts cannot reach more groups than this anyway: nothing is limited

    def verdict(windows: list[WindowReach], is_violated: bool, reason: str) -> RoutingReach:
        return RoutingReach(pool.deployment, pool.role, limit, tuple(windows), is_violated, reason)

    changed_at = -np.inf if pool.routing_changed_at is None else pool.routing_changed_at
    measured = [r for w in pool.windows
                if w.start >= changed_at + SETTLE_WINDOWS * w.seconds and (r := window_reach(w, limit)) is not None]
    windows = measured[-policy.sustained_windows:]
    if policy.mode == Mode.off:
        return verdict(windows, False, "policy mode is off")
    if limit is None:
        return verdict(windows, False, "no group limit in force")
    if len(windows) < policy.sustained_windows:
        return verdict(windows, False, f"{len(windows)} windows measured groups per token under topk_group={limit}, "
                                       f"need {policy.sustained_windows}")
    if any(w.over_limit_share <= MAX_OVER_LIMIT_SHARE for w in windows):
        return verdict(windows, False, f"topk_group={limit} honoured: at most {windows[-1].groups_max} groups "
                                       f"per token")
    worst = max(windows, key=lambda w: w.over_limit_share)
    nodes = f"; nodes per token up to {worst.nodes_max} (mean {worst.nodes_mean:.2f})" \
        if worst.nodes_max is not None else ""
    return verdict(windows, True, (
        f"routing limit topk_group={limit} not in effect: {worst.over_limit_share:.0%} of tokens reached more "
        f"groups (up to {worst.groups_max}, mean {worst.groups_mean:.2f}) in each of windows "
        f"{', '.join(str(w.index) for w in windows)}{nodes}; a code path bypasses the group-limited top-k"))
