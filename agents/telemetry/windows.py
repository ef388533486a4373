"""One rank's step stats summed into windows on the controller's grid, each closed into a `Snapshot`.

Window `i` covers wall-clock `[i * window_seconds, (i + 1) * window_seconds)`, on the grid the controller
files snapshots by (agents/protocol/grid.py), so every rank of every instance lines up.
MoE arrays are summed where the engine keeps them (on device, no host sync per step) and copied
to the host once, when the window closes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
from torch import Tensor

from agents.protocol import Array, Identity, LatencySummary, ModelShape, ServingCounters, Snapshot, StepLoad
from agents.protocol.grid import window_index, window_start
from agents.runtime.stats import StepStats
from agents.telemetry.latency import LatencySamples


@dataclass
class WindowSums:
    """Sums over the steps of one window, on the engine's device. Arrays stay None until the first step adds
    them."""

    index: int
    num_steps: int = 0
    expert_tokens: Tensor | None = None  # [num_layers, num_experts]
    slot_tokens: Tensor | None = None  # [num_layers, slots_per_rank]
    recall_kept: Tensor | None = None  # [num_layers]
    recall_total: Tensor | None = None  # [num_layers]
    dropped_tokens: Tensor | None = None  # [num_layers]
    groups_per_token: Tensor | None = None  # [num_layers, top_k + 1]; stays None if the engine does not count it
    nodes_per_token: Tensor | None = None  # [num_layers, top_k + 1]
    # the dispatch-time split's step sums (MoECounters), [num_layers]; None unless the engine measures them
    split_max_tokens: Tensor | None = None
    shares_max_tokens: Tensor | None = None
    bound_max_tokens: Tensor | None = None
    group_tokens: Tensor | None = None
    num_split_routed_steps: int = 0
    forward_seconds: float = 0.0
    dispatch_seconds: float = 0.0
    combine_seconds: float = 0.0
    prefix_query_tokens: int = 0
    prefix_hit_tokens: int = 0
    spec_drafts: int = 0
    spec_draft_tokens: int = 0
    spec_accepted_tokens: int = 0
    spec_accepted_by_position: list[int] = field(default_factory=list)
    requests_running: int = 0
    requests_waiting: int = 0
    placement_version: int = 0
    num_switches: int = 0  # placement switches in the window, and the seconds they took (what a change costs)
    switch_seconds: float = 0.0
    ttft: list[float] = field(default_factory=list)
    itl: list[float] = field(default_factory=list)
    # serving work (ServingCounters); batch and KV are integrated over wall time between step ends
    busy_seconds: float = 0.0
    prefill_tokens: int = 0
    num_prefilled: int = 0
    queued_tokens: int = 0
    num_waiting_handoffs: int = 0
    batch_seconds: float = 0.0
    kv_token_seconds: float = 0.0
    kv_capacity_tokens: int = 0
    max_batch: int = 0
    last_step_at: float | None = None

    def add(self, stats: StepStats, samples: LatencySamples, num_waiting_handoffs: int = 0) -> None:
        moe = stats.moe
        if self.num_steps and stats.placement_version != self.placement_version:
            # a slot holds another expert under the new table: the window's slot counts are those of the table it
            # ends on, so a change is never judged on steps that ran the one before it (controlplane/loop/verify.py)
            self.slot_tokens = None
        self.expert_tokens = _accumulate(self.expert_tokens, moe.expert_tokens)
        self.slot_tokens = _accumulate(self.slot_tokens, moe.slot_tokens)
        self.recall_kept = _accumulate(self.recall_kept, moe.recall_kept)
        self.recall_total = _accumulate(self.recall_total, moe.recall_total)
        self.dropped_tokens = _accumulate(self.dropped_tokens, moe.dropped_tokens)
        if moe.groups_per_token is not None and moe.nodes_per_token is not None:
            self.groups_per_token = _accumulate(self.groups_per_token, moe.groups_per_token)
            self.nodes_per_token = _accumulate(self.nodes_per_token, moe.nodes_per_token)
        if moe.split_max_tokens is not None:
            self.split_max_tokens = _accumulate(self.split_max_tokens, moe.split_max_tokens)
            self.shares_max_tokens = _accumulate(self.shares_max_tokens, moe.shares_max_tokens)
            self.bound_max_tokens = _accumulate(self.bound_max_tokens, moe.bound_max_tokens)
            self.group_tokens = _accumulate(self.group_tokens, moe.group_tokens)
            self.num_split_routed_steps += moe.is_split_routed
        self.num_steps += 1
        self.forward_seconds += stats.forward_seconds
        self.dispatch_seconds += moe.dispatch_seconds
        self.combine_seconds += moe.combine_seconds
        self.prefix_query_tokens += stats.prefix_query_tokens
        self.prefix_hit_tokens += stats.prefix_hit_tokens
        self.spec_drafts += stats.spec_num_drafts
        self.spec_draft_tokens += stats.spec_draft_tokens
        self.spec_accepted_tokens += stats.spec_accepted_tokens
        for position, count in enumerate(stats.spec_accepted_by_position):
            if position == len(self.spec_accepted_by_position):
                self.spec_accepted_by_position.append(0)
            self.spec_accepted_by_position[position] += count
        self.requests_running, self.requests_waiting = stats.num_running, stats.num_waiting  # at window end
        self.placement_version = stats.placement_version  # the version the window ended on
        if stats.placement_switch_seconds is not None:
            self.num_switches += 1
            self.switch_seconds += stats.placement_switch_seconds
        self.ttft += samples.ttft
        self.itl += samples.itl
        if stats.num_scheduled_tokens:
            self.busy_seconds += stats.step_seconds
        self.prefill_tokens += stats.num_prefill_tokens
        self.num_prefilled += len(samples.ttft)
        self.queued_tokens, self.num_waiting_handoffs = stats.num_waiting_tokens, num_waiting_handoffs
        held = stats.step_seconds if self.last_step_at is None else max(0.0, stats.timestamp - self.last_step_at)
        self.batch_seconds += stats.num_running * held
        self.kv_token_seconds += stats.num_kv_tokens * held
        self.kv_capacity_tokens, self.max_batch = stats.kv_capacity_tokens, stats.max_num_seqs
        self.last_step_at = stats.timestamp

    def serving(self, window_seconds: float) -> ServingCounters:
        return ServingCounters(busy_seconds=self.busy_seconds, prefill_tokens=self.prefill_tokens,
                               num_prefilled=self.num_prefilled, queued_tokens=self.queued_tokens,
                               num_waiting=self.requests_waiting + self.num_waiting_handoffs,
                               batch_mean=self.batch_seconds / window_seconds,
                               kv_tokens_mean=self.kv_token_seconds / window_seconds,
                               kv_capacity_tokens=self.kv_capacity_tokens, max_batch=self.max_batch)


def _accumulate(total: Tensor | None, step: Tensor) -> Tensor:
    # the engine reuses nothing between steps, but a copy keeps the window independent of it anyway
    return step.clone() if total is None else total + step


@dataclass(frozen=True)
class ClosedWindow:
    """A finished window, on the host: what the snapshot and the window-level metrics are made of.

    expert_tokens: [num_layers, num_experts]; slot_tokens: [num_layers, slots_per_rank] int64.
    recall: [num_layers] kept / unconstrained top-k assignments, NaN where a layer routed nothing.
    """

    snapshot: Snapshot
    expert_tokens: np.ndarray
    slot_tokens: np.ndarray
    recall: np.ndarray
    num_dropped_tokens: int = 0


class WindowBuilder:
    """Sums one rank's steps and closes a window when the wall clock passes its end."""

    def __init__(self, identity: Identity, model: ModelShape, window_seconds: float, now: float):
        self.identity, self.model = identity, model
        self.window_seconds = window_seconds
        self.placement_version = 0
        self.current = WindowSums(self.index_at(now))

    def index_at(self, now: float) -> int:
        return window_index(now, self.window_seconds)

    def add(self, stats: StepStats, samples: LatencySamples, num_waiting_handoffs: int = 0) -> None:
        self.current.add(stats, samples, num_waiting_handoffs)
        self.placement_version = stats.placement_version

    def roll(self, now: float) -> ClosedWindow | None:
        """Closes the current window if `now` is past its end; the next one starts at `now`'s index.

        A window length change (from the controller) takes effect at the next window."""
        return self.roll_to(self.index_at(now))

    def roll_to(self, index: int) -> ClosedWindow | None:
        """Closes the current window if `index` (a window of the grid) is past it, and starts window `index`.
        An EP group reporting as one rolls every rank to the index the ranks agreed on."""
        if index <= self.current.index:
            return None
        closed = self.close(self.current)
        last_step_at, self.current = self.current.last_step_at, WindowSums(index)
        self.current.last_step_at = last_step_at  # time since the last step counts in the window it ends in
        return closed

    def relabel(self, index: int) -> None:
        """Files the current window's sums under window `index` instead (an EP group aligning its ranks)."""
        self.current.index = index

    def set_window_seconds(self, window_seconds: float, now: float) -> ClosedWindow | None:
        if math.isclose(window_seconds, self.window_seconds):
            return None
        closed = self.close(self.current) if self.current.num_steps else None
        self.window_seconds = window_seconds
        self.current = WindowSums(self.index_at(now))
        return closed

    def close(self, sums: WindowSums) -> ClosedWindow:
        num_layers, num_experts = self.model.num_layers, self.model.num_experts
        slots = self.identity.slots_per_rank
        expert_tokens = _host(sums.expert_tokens, (num_layers, num_experts))
        slot_tokens = _host(sums.slot_tokens, (num_layers, slots))
        kept, total = _host(sums.recall_kept, (num_layers,)), _host(sums.recall_total, (num_layers,))
        with np.errstate(invalid="ignore", divide="ignore"):
            recall = np.where(total > 0, kept / np.maximum(total, 1), np.nan)
        num_total = int(total.sum())
        version = sums.placement_version if sums.num_steps else self.placement_version
        dropped = int(_host(sums.dropped_tokens, (num_layers,)).sum())
        snapshot = Snapshot(
            identity=self.identity, model=self.model, window_start=window_start(sums.index, self.window_seconds),
            window_seconds=self.window_seconds, placement_version=version, num_steps=sums.num_steps,
            expert_tokens=Array.from_numpy(expert_tokens), slot_tokens=Array.from_numpy(slot_tokens),
            forward_seconds=sums.forward_seconds, dispatch_seconds=sums.dispatch_seconds,
            combine_seconds=sums.combine_seconds, prefix_query_tokens=sums.prefix_query_tokens,
            prefix_hit_tokens=min(sums.prefix_hit_tokens, sums.prefix_query_tokens),
            spec_drafts=sums.spec_drafts, spec_draft_tokens=sums.spec_draft_tokens,
            spec_accepted_tokens=min(sums.spec_accepted_tokens, sums.spec_draft_tokens),
            spec_accepted_by_position=_by_position(sums),
            requests_running=sums.requests_running, requests_waiting=sums.requests_waiting,
            ttft=LatencySummary.of(sums.ttft), itl=LatencySummary.of(sums.itl),
            routing_recall=min(1.0, int(kept.sum()) / num_total) if num_total else None,
            routing_groups_per_token=self._per_token(sums.groups_per_token),
            routing_nodes_per_token=self._per_token(sums.nodes_per_token),
            serving=sums.serving(self.window_seconds), step_load=self._step_load(sums), dropped_tokens=dropped,
            balancer_events=sums.num_switches,
            balancer_stall_seconds=sums.switch_seconds if sums.num_switches else None)
        return ClosedWindow(snapshot, expert_tokens, slot_tokens, recall, dropped)

    def _step_load(self, sums: WindowSums) -> StepLoad | None:
        """The split's step sums over layers (one host copy each); None when the engine did not measure them."""
        if sums.group_tokens is None:
            return None

        def total(value: Tensor) -> float:
            return float(value.detach().to("cpu", dtype=value.dtype).sum())

        return StepLoad(is_split_routed=2 * sums.num_split_routed_steps > sums.num_steps,
                        split_max_tokens=total(sums.split_max_tokens),
                        shares_max_tokens=total(sums.shares_max_tokens),
                        bound_max_tokens=total(sums.bound_max_tokens),
                        mean_tokens=total(sums.group_tokens) / self.identity.ep_size)

    def _per_token(self, counts: Tensor | None) -> list[int]:
        """[num_layers, top_k + 1] -> the histogram summed over layers; [] when the engine counts none."""
        if counts is None:
            return []
        return _host(counts, (self.model.num_layers, self.model.top_k + 1)).sum(axis=0).tolist()


def _host(value: Tensor | None, shape: tuple[int, ...]) -> np.ndarray:
    if value is None:
        return np.zeros(shape, dtype=np.int64)
    array = value.detach().cpu().numpy().astype(np.int64)  # the one host copy per window
    if array.shape != shape:
        raise ValueError(f"engine counters have shape {array.shape}, the model shape needs {shape}")
    return array


def _by_position(sums: WindowSums) -> list[int]:
    """Per-position acceptance as the wire allows it: at most 16 positions, summing to the accepted total."""
    counts = sums.spec_accepted_by_position[:16]
    budget = min(sums.spec_accepted_tokens, sums.spec_draft_tokens)
    return counts if sum(counts) <= budget else []
