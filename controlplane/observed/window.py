"""One pool's window as the loop reads it (`Window`: all ranks of all instances over `window_seconds`), the
counters' names it is read by, and what is measured over several windows. Pure."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from agents.protocol.placement import PlacementTable, gpu_load, imbalance, layer_imbalance

RANK_REPORTS = "slot_reports_rank_"  # + EP rank: window counter, reports whose slot load the window counted
ACCEPTED_AT = "spec_accepted_at_"  # + draft position: window counter, accepted draft tokens there
GROUPS_AT, NODES_AT = "routing_groups_at_", "routing_nodes_at_"  # + n: tokens whose top-k reached n groups / nodes
# window counters that say the engine served: steps, requests running at the window's end, and requests or tokens
# answered in it (the engine's TTFT/ITL histograms, controlplane/collect/aggregate.py)
SERVING_COUNTERS = ("num_steps", "requests_running", "ttft_count", "itl_count")

def expert_share(expert_tokens: np.ndarray) -> np.ndarray:
    """[num_layers, num_experts] tokens -> each layer's distribution over its experts (rows sum to 1; an empty
    layer stays 0)."""
    tokens = np.asarray(expert_tokens, np.float64)
    return tokens / np.maximum(tokens.sum(axis=1, keepdims=True), 1.0)


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

    @property
    def is_loaded(self) -> bool:
        """The agents counted expert load in the window. One without (an idle engine, or an SGLang window whose
        dump did not come: agents/adapters/sglang/sidecar.py) says nothing of which experts run."""
        return float(self.expert_tokens.sum()) > 0

    @property
    def is_serving(self) -> bool:
        """The window carried traffic: the agents counted expert load, the ranks stepped, requests were running, or
        the engine answered requests (`SERVING_COUNTERS`)."""
        return self.is_loaded or any(self.counters.get(name, 0.0) > 0 for name in SERVING_COUNTERS)

    @property
    def is_load_measured(self) -> bool:
        """Its expert load is what the engine routed: counted, or idle. Not so for a serving window without it
        (SGLang's whose dump did not come), whose zero tokens are unknown, not none."""
        return self.is_loaded or not self.is_serving

    def is_slot_load_complete(self, ep_size: int) -> bool:
        reports = [self.counters.get(f"{RANK_REPORTS}{rank}", 0) for rank in range(ep_size)]
        return min(reports) > 0 and min(reports) == max(reports)

    def is_mostly_under_its_placement(self) -> bool:
        """Whether the slot load covers at least half of the expert load. A switch inside a window restarts the
        ranks' slot counts (agents/telemetry/windows.py): ranks that switched late in it measured the new table
        on a few of its tokens, which read as a straggler by chance."""
        return float(self.slot_tokens.sum()) >= 0.5 * float(self.expert_tokens.sum())

    @property
    def all2all_share(self) -> float | None:
        c = self.counters
        forward = c.get("forward_seconds", 0.0)
        return (c.get("dispatch_seconds", 0.0) + c.get("combine_seconds", 0.0)) / forward if forward > 0 else None

    def ratio(self, numerator: str, denominator: str) -> float | None:
        den = self.counters.get(denominator, 0.0)
        return self.counters.get(numerator, 0.0) / den if den > 0 else None

    def layer_imbalance(self, ep_size: int) -> np.ndarray | None:
        """[loaded layers] max/mean GPU load of each MoE layer that carried load (a per-layer straggler the
        mean over layers can hide); None under the same conditions as `imbalance`."""
        if not self.is_slot_load_complete(ep_size):
            return None
        ratio = layer_imbalance(self.gpu_load(ep_size))
        return ratio[~np.isnan(ratio)] if (~np.isnan(ratio)).any() else None

    def step_imbalance(self) -> dict[str, float] | None:
        """The step-level straggler factor (busiest GPU over mean, token-weighted over steps and MoE layers).

        It is given with the dispatch-time split ("split"), with the window's fixed shares ("shares") and at the
        per-step LP bound ("bound"). "routed" is the share of the load the ranks routed by the split. None when no
        agent measured it (agents/protocol/snapshot.py StepLoad)."""
        mean = self.counters.get("step_mean_tokens", 0.0)
        if mean <= 0:
            return None
        kinds = ("split", "shares", "bound")
        ratios = {kind: self.counters.get(f"step_{kind}_max_tokens", 0.0) / mean for kind in kinds}
        return ratios | {"routed": self.counters.get("step_split_routed_mean_tokens", 0.0) / mean}

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


def imbalance_had_it_run(table: PlacementTable, windows, num_gpus: int) -> float | None:
    """Mean over `windows` of `table`'s imbalance on their expert load: what they would have measured under
    `table` (their sampling noise included). None when a window carries no expert load. The planner predicts a
    change with it and the verdict restates both tables on the windows measured under the change."""
    values = [table.imbalance(w.expert_tokens, num_gpus) for w in windows]
    return None if not values or None in values else float(np.mean(values))


def acceptance_by_position(windows) -> list[float]:
    """MTP acceptance at each draft position over `windows` (or counter dicts): a draft reaches position i only
    if 0..i-1 were accepted, so the ratio is per draft, not per token proposed there."""
    counters = [w.counters if isinstance(w, Window) else w for w in windows]
    drafts = sum(c.get("spec_drafts", 0.0) for c in counters)
    positions = sorted({int(k[len(ACCEPTED_AT):]) for c in counters for k in c if k.startswith(ACCEPTED_AT)})
    return [round(sum(c.get(f"{ACCEPTED_AT}{i}", 0.0) for c in counters) / drafts, 4)
            for i in positions] if drafts > 0 else []


def dropped_share(windows) -> float | None:
    """The share of the token-expert assignments routed over `windows` that the per-expert capacity limit dropped
    (agents/protocol/snapshot.py `dropped_tokens`); None when they routed none."""
    routed = sum(float(w.expert_tokens.sum()) for w in windows if w.expert_tokens.size)
    return sum(w.counters.get("dropped_tokens", 0.0) for w in windows) / routed if routed > 0 else None
