"""What is: frozen views of a pool's recent windows and applied state, read from the store.

The planner takes these and nothing else, so it can be tested with plain arrays.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field

import numpy as np

from agents.protocol.placement import PlacementTable, gpu_load, imbalance, layer_imbalance
from controlplane.desired import Effect, KnobKind
from controlplane.observed.knob_in_force import KnobInForce

RANK_REPORTS = "slot_reports_rank_"  # + EP rank: window counter, reports whose slot load the window counted
ACCEPTED_AT = "spec_accepted_at_"  # + draft position: window counter, accepted draft tokens there
GROUPS_AT, NODES_AT = "routing_groups_at_", "routing_nodes_at_"  # + n: tokens whose top-k reached n groups / nodes
# a serving replica's first windows after it became ready are cold (caches, kernels): slower than it will run,
# so the latency model leaves them out (learn/latency.py) and the pool planner does not answer them (solve/)
COLD_START_WINDOWS = 6

# the load is compared over the last minute of windows at least: two 2 s windows of a bursty pool (a prefill
# pool under Poisson arrivals) swing 2x by chance, which would lift a park every few windows
LOAD_SPAN_SECONDS = 60.0


@dataclass(frozen=True)
class KnobInputs:
    """What a knob's change was decided from. expert_share: [num_layers, num_experts], rows sum to 1 (None:
    the knob does not depend on which experts are hot); tokens_per_second: routed tokens the pool took."""

    model: str  # `model_key` of the model shape
    policy_version: int
    tokens_per_second: float | None
    expert_share: np.ndarray | None = None


@dataclass(frozen=True)
class FailedTry:
    """One reverted change of the knob: when it was applied, the inputs it was decided from, and its effect on its
    signal as predicted and as measured (the signal's unit, signed the same way)."""

    at: float
    inputs: KnobInputs
    predicted: float
    realised: float

    @property
    def realised_share(self) -> float:
        return self.realised / self.predicted if self.predicted else 0.0


@dataclass(frozen=True)
class Parked:
    """A knob parked for a pool: since when, by which action's verdict, why, and the inputs it was parked at."""

    knob: str
    since: float
    action_id: int | None
    reason: str
    inputs: KnobInputs
    tries: tuple[FailedTry, ...] = ()  # the knob's reverted changes on the pool, oldest first (this one last)


def model_key(model: dict) -> str:
    """A short stable fingerprint of a model shape (its JSON form)."""
    return hashlib.sha256(json.dumps(model, sort_keys=True).encode()).hexdigest()[:16]


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


@dataclass(frozen=True)
class KnobChange:
    """An applied change of one of the pool's knobs, whoever asked for it. direction: +1 the knob's value
    went up (a looser routing limit), -1 down, 0 the knob has no order (a placement)."""

    action_id: int
    knob: str
    at: float
    status: str
    direction: int
    effect: Effect | None = None


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
    # kind -> what the pool's one-number knobs hold (controlplane/store/knobs.py `IN_POOL_STATE`); a kind not here
    # is at version 0, none issued
    in_force: dict[str, KnobInForce] = field(default_factory=dict)
    top_k: int = 1
    model_topk_group: int | None = None  # the limit the model routes with when the controller sets none
    num_gone_agents: int = 0  # silent past the gone limit: counted nowhere but in the overview
    model_key: str = ""  # fingerprint of the model shape (parking.model_key)
    policy_version: int = 0
    parked: dict[str, Parked] = field(default_factory=dict)  # knob -> its park, while one stands
    changes: tuple[KnobChange, ...] = ()  # recent applied changes of every knob, oldest first
    # routing recall (against the unconstrained top-k) measured under the model's own limit, as recorded by
    # the action that set the limit in force; None: not recorded (or the model's own limit is in force)
    recall_reference: float | None = None

    def knob(self, kind: str) -> KnobInForce:
        """What the knob `kind` holds now (version 0 when none was issued)."""
        return self.in_force.get(kind, KnobInForce())

    @property
    def topk_group(self) -> int | None:
        """The routing limit the controller issued; None: the model's own."""
        return self.knob(KnobKind.routing).value

    @property
    def routing_changed_at(self) -> float | None:
        return self.knob(KnobKind.routing).changed_at

    @property
    def num_slots(self) -> int:
        return self.ep_size * self.slots_per_rank

    @property
    def placement(self) -> PlacementTable:
        """The placement the controller last issued."""
        return PlacementTable(self.slot_to_expert, self.slot_share, self.placement_version)

    @property
    def effective_topk_group(self) -> int:
        """The groups per token the agents route with: the issued limit, else the model's own, else all."""
        return self.topk_group or self.model_topk_group or self.num_groups

    def routing_recall(self, window: Window) -> float | None:
        """Routing recall against the model's own routing (its topk_group), under the limit in force. Agents
        measure recall against the unconstrained top-k. A limit no looser than the model's own keeps a subset
        of the unconstrained top-k experts the model's own limit keeps (its groups are a subset of those
        groups). So the ratio of the two recalls is the share of those the tighter limit still keeps: exact
        per token, a ratio of means over a window. 1.0 at the model's own limit."""
        raw = window.ratio("routing_recall_sum", "routing_recall_count")
        if raw is None or self.model_topk_group is None:
            return raw  # the model routes over every group: its own routing is the unconstrained top-k
        if self.effective_topk_group >= self.model_topk_group:
            return 1.0
        return min(1.0, raw / self.recall_reference) if self.recall_reference else None

    def signals(self, windows: tuple[Window, ...] | list[Window]) -> dict[str, float | None]:
        """The signals changes aim at (controlplane/plan/effect.py), over `windows`: ratios of sums for the
        counters, means over windows for the imbalance and the recall."""

        def mean(values) -> float | None:
            values = [v for v in values if v is not None]
            return float(np.mean(values)) if values else None

        def pooled(numerators: tuple[str, ...], denominator: str) -> float | None:
            den = sum(w.counters.get(denominator, 0.0) for w in windows)
            return sum(w.counters.get(n, 0.0) for w in windows for n in numerators) / den if den > 0 else None

        return {"imbalance": mean(w.imbalance(self.ep_size) for w in windows),
                "all2all_share": pooled(("dispatch_seconds", "combine_seconds"), "forward_seconds"),
                "routing_recall": mean(self.routing_recall(w) for w in windows),
                "mtp_acceptance": pooled(("spec_accepted_tokens",), "spec_draft_tokens"),
                "dropped_share": dropped_share(windows)}

    def knob_inputs(self, *, with_expert_share: bool) -> KnobInputs:
        """What a knob's change is decided from now (controlplane/plan/parking.py): the load over the most recent
        windows covering `LOAD_SPAN_SECONDS` (all there are, when fewer)."""
        windows, seconds = [], 0.0
        for window in reversed(self.windows):
            if seconds >= LOAD_SPAN_SECONDS:
                break
            windows.append(window)
            seconds += window.seconds
        # layer 0's row counts every routed token top_k times
        tokens = sum(float(w.expert_tokens[0].sum()) for w in windows if len(w.expert_tokens)) / max(self.top_k, 1)
        share = None
        if with_expert_share and windows:
            share = expert_share(np.sum([w.expert_tokens for w in windows], axis=0))
        return KnobInputs(self.model_key, self.policy_version, tokens / seconds if seconds > 0 else None, share)

    def windows_since_change(self, kind: str) -> list[Window]:
        """Windows from the knob's last change on (all of them when it never changed), oldest first: what a
        one-number knob is judged on (a placement is judged on `windows_under` its version instead)."""
        return [w for w in self.windows if w.start >= (self.knob(kind).changed_at or 0.0)]

    def routing_windows(self) -> list[Window]:
        """Windows from the routing limit's last change on (all of them when it never changed), oldest first."""
        return self.windows_since_change(KnobKind.routing)

    def windows_under(self, placement_version: int) -> tuple[Window, ...]:
        """Complete windows that ran `placement_version` for most of their load, oldest first: what a placement
        is planned and judged on."""
        return tuple(w for w in self.windows if w.placement_version == placement_version
                     and w.num_slot_reports == w.num_reports and w.is_mostly_under_its_placement())

    def current_windows(self) -> tuple[Window, ...]:
        """`windows_under` the issued placement."""
        return self.windows_under(self.placement_version)
