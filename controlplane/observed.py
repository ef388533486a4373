"""What is: frozen views of a pool's recent windows and applied state, read from the store.

The planner takes these and nothing else, so it can be tested with plain arrays.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from agents.protocol.placement import PlacementTable, gpu_load, imbalance

RANK_REPORTS = "slot_reports_rank_"  # + EP rank: window counter, reports whose slot load the window counted
GROUPS_AT, NODES_AT = "routing_groups_at_", "routing_nodes_at_"  # + n: tokens whose top-k reached n groups / nodes


@dataclass(frozen=True)
class Window:
    """One pool's aggregated window (all ranks of all instances).

    expert_tokens: [num_layers, num_experts] tokens routed to each logical expert.
    slot_tokens: [num_layers, num_slots] tokens each slot processed, from reports that ran
    `placement_version` only; `num_slot_reports` of them.
    counters: summed scalar counters (see collect.aggregate.COUNTERS).
    """

    index: int
    start: float
    seconds: float
    placement_version: int
    num_reports: int
    num_slot_reports: int
    expert_tokens: np.ndarray
    slot_tokens: np.ndarray
    counters: dict[str, float] = field(default_factory=dict)

    def gpu_load(self, ep_size: int) -> np.ndarray:
        """[num_layers, ep_size] tokens per GPU (rank) under the window's placement."""
        return gpu_load(self.slot_tokens, ep_size)

    def imbalance(self, ep_size: int) -> float | None:
        """Mean over loaded MoE layers of max/mean GPU load: the straggler factor of each layer's step
        (agents/protocol/placement.py, the number the agents' gauge and the solver's forecast use).

        None when no layer carried load, and unless every rank's slot load is in, from as many instances
        as any rank's: a GPU that did not report would read as idle and fake a straggler elsewhere."""
        if not self.is_slot_load_complete(ep_size):
            return None
        return imbalance(self.gpu_load(ep_size))

    def is_slot_load_complete(self, ep_size: int) -> bool:
        reports = [self.counters.get(f"{RANK_REPORTS}{rank}", 0) for rank in range(ep_size)]
        return min(reports) > 0 and min(reports) == max(reports)

    @property
    def all2all_share(self) -> float | None:
        c = self.counters
        forward = c.get("forward_seconds", 0.0)
        return (c.get("dispatch_seconds", 0.0) + c.get("combine_seconds", 0.0)) / forward if forward > 0 else None

    def ratio(self, numerator: str, denominator: str) -> float | None:
        den = self.counters.get(denominator, 0.0)
        return self.counters.get(numerator, 0.0) / den if den > 0 else None

    def per_token(self, prefix: str) -> np.ndarray | None:
        """[max n + 1] tokens (over ranks and MoE layers) whose top-k reached n groups (prefix GROUPS_AT) or
        nodes (NODES_AT); None when no report measured it (agents before the measure)."""
        counts = {int(k[len(prefix):]): v for k, v in self.counters.items() if k.startswith(prefix)}
        if not counts:
            return None
        histogram = np.zeros(max(counts) + 1)
        for n, v in counts.items():
            histogram[n] = v
        return histogram


@dataclass(frozen=True)
class PoolState:
    """A pool (one role of a deployment) as the loop sees it at `now`.

    slot_to_expert: [num_layers, num_slots] the placement the controller last issued (its version
    is `placement_version`); windows: complete windows, oldest first.
    """

    deployment: str
    role: str
    num_layers: int
    num_experts: int
    num_groups: int
    ep_size: int
    slots_per_rank: int
    gpus_per_node: int
    num_agents: int  # fresh and stale: the quorum's whole (gone agents left it)
    num_fresh_agents: int
    placement_version: int
    slot_to_expert: np.ndarray
    windows: tuple[Window, ...]
    slot_share: np.ndarray | None = None  # [num_layers, num_slots] of the issued placement; None: even split
    last_change_at: float | None = None
    moved_slots_last_hour: int = 0
    num_actions_last_hour: int = 0
    topk_group: int | None = None  # the routing limit the controller issued; None: unlimited
    routing_changed_at: float | None = None
    top_k: int = 1
    model_topk_group: int | None = None  # the limit the model routes with when the controller sets none
    num_gone_agents: int = 0  # silent past the gone limit: counted nowhere but in the overview

    @property
    def num_slots(self) -> int:
        return self.ep_size * self.slots_per_rank

    @property
    def placement(self) -> PlacementTable:
        """The placement the controller last issued."""
        return PlacementTable(self.slot_to_expert, self.slot_share, self.placement_version)

    def current_windows(self) -> tuple[Window, ...]:
        """Complete windows measured entirely under the issued placement, oldest first."""
        return tuple(w for w in self.windows
                     if w.placement_version == self.placement_version and w.num_slot_reports == w.num_reports)
