"""What is: a frozen view of a pool's recent windows and applied state (`PoolState`), read from the store.

The planner takes these and nothing else, so it can be tested with plain arrays. A window is
observed/window.py, a park observed/knob_park.py, an applied change observed/knob_change.py, a one-number knob
in force observed/knob_in_force.py.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from agents.protocol.placement import PlacementTable
from controlplane.desired import KnobKind
from controlplane.observed.knob_change import KnobChange
from controlplane.observed.knob_in_force import KnobInForce
from controlplane.observed.knob_park import KnobInputs, Parked
from controlplane.observed.window import Window, dropped_share, expert_share

# a serving replica's first windows after it became ready are cold (caches, kernels): slower than it will run,
# so the latency model leaves them out (learn/latency.py) and the pool planner does not answer them (solve/)
COLD_START_WINDOWS = 6

# the load is compared over the last minute of windows at least: two 2 s windows of a bursty pool (a prefill
# pool under Poisson arrivals) swing 2x by chance, which would lift a park every few windows
LOAD_SPAN_SECONDS = 60.0


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
        # the rate over the windows whose load was measured: an SGLang window without its dump served an unknown
        # number of tokens, not none (Window.is_load_measured)
        measured = [w for w in windows if w.is_load_measured and len(w.expert_tokens)]
        # layer 0's row counts every routed token top_k times
        tokens = sum(float(w.expert_tokens[0].sum()) for w in measured) / max(self.top_k, 1)
        seconds = sum(w.seconds for w in measured)
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
