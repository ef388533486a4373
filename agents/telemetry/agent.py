"""The agent embedded in one EP rank: step stats -> windows and metrics; snapshot per window to the
controller; the desired state it answers -> the engine, at a step boundary.

Everything here runs on the engine's thread and costs a few dictionary updates per step: posting
happens on the poster's thread, and MoE counters stay on the device until a window closes.
Applying a placement only stages it. The engine switches at the first step where every rank of the
group staged the same version (each rank's agent gets the same answer from the controller). So the
group never runs two placements at once. If the controller is unreachable nothing is applied and the
rank keeps serving on the last state it had.

Given its EP group (`group`), the agents of the group report as one (moectl.v2, agents/telemetry/group.py).
They close each window at the same step. Rank 0 gathers the group's window, posts it, and shares the
answer with the other ranks, which have no poster of their own. Without it every rank posts its own
snapshot (moectl.v1).
"""

from __future__ import annotations

import logging
import math
import threading
import time
import zlib
from collections.abc import Callable

import numpy as np
import torch
from prometheus_client import CollectorRegistry

from agents import protocol
from agents.protocol import DesiredState, Identity, ModelShape
from agents.runtime.placement import EngineRoutingLimits, Placement
from agents.runtime.stats import StepStats
from agents.telemetry.engine import AgentEngine, RuntimeInfo
from agents.telemetry.exporter import Exporter
from agents.telemetry.group import GroupCollective, GroupReporter
from agents.telemetry.imbalance import gpu_load_ratio
from agents.telemetry.latency import RequestTimer
from agents.telemetry.poster import ControllerLink, Registration, SnapshotPoster
from agents.telemetry.windows import ClosedWindow, WindowBuilder

log = logging.getLogger("moectl.agent")


def routing_version(limits: protocol.RoutingLimits, max_tokens_per_expert: int | None) -> int:
    """Every rank derives the same version from the same limits: the group agrees on it without talking."""
    if limits.topk_group is None and max_tokens_per_expert is None:
        return 0
    return zlib.crc32(repr((limits.topk_group, max_tokens_per_expert)).encode()) or 1


class Agent:
    def __init__(self, engine: AgentEngine, *, identity: Identity, model: ModelShape, registry: CollectorRegistry,
                 link: ControllerLink | None = None, registration: Registration | None = None,
                 window_seconds: float = 5.0, runtime: RuntimeInfo | None = None,
                 clock: Callable[[], float] = time.time, group: GroupCollective | None = None):
        """link: where its windows go (None: nowhere).
        registration: what registers the deployment if the controller does not know it (one rank of a group, so
        that no two race to create it).
        runtime: the engine's configuration (None: the bundled runtime's defaults)."""
        self.engine, self.identity, self.model, self.clock = engine, identity, model, clock
        self.runtime = runtime or RuntimeInfo()
        self.exporter = Exporter(registry, deployment=identity.deployment, role=identity.role.value,
                                 ep_rank=identity.rank, num_layers=model.num_layers,
                                 num_speculative_tokens=self.runtime.num_speculative_tokens, top_k=model.top_k)
        self.windows = WindowBuilder(identity, model, window_seconds, clock())
        self.timer = RequestTimer()
        self.local_prefill_threshold: int | None = None
        self.last_answer_time: float | None = None
        self._answer: DesiredState | None = None
        self._lock = threading.Lock()
        self._staged_version = engine.placement.version
        self._refused_versions: set[int] = set()
        self.group = GroupReporter(group) if group is not None else None
        self._answer_seq = self._shared_seq = 0  # group: answers rank 0 received, and the last one shared
        is_poster = self.group is None or self.group.is_poster
        self.poster = SnapshotPoster(link, on_answer=self._on_answer, on_failure=self.exporter.report_failure,
                                     registration=registration, running_placement=self._running_placement,
                                     clock=clock).start() if link is not None and is_poster else None
        self._set_info()

    def on_step(self, stats: StepStats, num_waiting_handoffs: int = 0) -> None:
        """num_waiting_handoffs: KV hand-offs the serving loop holds until the engine has room for them."""
        samples = self.timer.observe(stats)
        self.exporter.observe_step(stats, samples)
        self.windows.add(stats, samples, num_waiting_handoffs)

    def tick(self, now: float | None = None) -> ClosedWindow | None:
        """Call between steps: applies a new answer and closes the window once it is over."""
        now = self.clock() if now is None else now
        if self.group is not None:
            closed = self._tick_group(now)
        else:
            with self._lock:
                answer, self._answer = self._answer, None
            if answer is not None:
                self.apply(answer, now)
            closed = self.windows.roll(now)
        if closed is not None:
            self._publish(closed)
        self._set_info()
        return closed

    def _tick_group(self, now: float) -> ClosedWindow | None:
        """Every rank of the group at the same step: agree, share rank 0's new answer, roll the window. Each
        branch depends only on what the ranks agreed, so they all take the same one (and the same collectives)."""
        with self._lock:
            seq = self._answer_seq
        agreed = self.group.agree(self.windows.index_at(now), seq, self.windows.current.index)
        if agreed.answer_seq > self._shared_seq:
            with self._lock:
                answer = self._answer
            answer = self.group.share_answer(answer)
            self._shared_seq = agreed.answer_seq
            if answer is not None:
                if not self.group.is_poster:
                    self.exporter.snapshots.inc()
                    self.last_answer_time = self.clock()
                self.apply(answer, now)
            return None  # the answer may change the window length: the next tick agrees afresh
        if not agreed.is_aligned:
            self.windows.relabel(max(agreed.window_index, agreed.current_index))
            return None
        return self.windows.roll_to(agreed.window_index)

    def close(self) -> None:
        if self.poster is not None:
            self.poster.stop()

    def _publish(self, closed: ClosedWindow) -> None:
        ratio = gpu_load_ratio(closed.expert_tokens, self.engine.placement, self.identity.ep_size)
        self.exporter.observe_window(closed, ratio)
        snapshot = closed.snapshot if self.group is None else self.group.gather(closed)
        if self.poster is not None and snapshot is not None:
            self.poster.submit(snapshot)

    def _running_placement(self, version: int) -> protocol.RunningPlacement | None:  # poster thread
        """The table the engine runs, if it still runs `version` (a controller that lost it adopts it)."""
        placement = self.engine.placement  # one read: the engine swaps the whole object when it switches
        if placement.version != version:
            return None
        share = placement.slot_share
        return protocol.RunningPlacement(slot_to_expert=protocol.Array.from_numpy(placement.slot_to_expert.numpy()),
                                         slot_share=None if share is None else protocol.Array.from_numpy(share.numpy()))

    def _on_answer(self, answer: DesiredState) -> None:  # poster thread
        self.exporter.snapshots.inc()
        with self._lock:
            self._answer = answer  # group: kept, rank 0 shares it at a tick
            self._answer_seq += 1
            self.last_answer_time = self.clock()

    def apply(self, desired: DesiredState, now: float) -> None:
        """Stages what differs from what the engine runs; the engine switches at an agreed step."""
        try:
            self._apply_placement(desired)
            self._apply_routing(desired.routing)
        except ValueError as exc:
            log.error("rank %d: cannot apply the desired state: %s", self.identity.rank, exc)
            self.exporter.report_failure("apply")
        self.local_prefill_threshold = desired.local_prefill_threshold
        if desired.window_seconds and not math.isclose(desired.window_seconds, self.windows.window_seconds):
            closed = self.windows.set_window_seconds(desired.window_seconds, now)
            if closed is not None:
                self._publish(closed)

    def _apply_placement(self, desired: DesiredState) -> None:
        version = desired.placement_version
        if desired.slot_to_expert is None or version in (self.engine.placement.version, self._staged_version):
            return
        if version in self._refused_versions:
            return
        table = desired.slot_to_expert.to_numpy()
        share = desired.slot_share.to_numpy() if desired.slot_share is not None else None
        try:
            placement = Placement(torch.from_numpy(table.astype(np.int64)),
                                  None if share is None else torch.from_numpy(share.astype(np.float64)), version)
            self.engine.apply_placement(placement)
        except ValueError:
            self._refused_versions.add(version)  # the same table would fail again every window
            raise
        self._staged_version = version
        log.info("rank %d: staged placement v%d", self.identity.rank, version)

    def _apply_routing(self, limits: protocol.RoutingLimits) -> None:
        max_tokens = None
        if limits.expert_capacity_factor is not None and self.runtime.max_batched_tokens:
            # the runtime caps rows per expert per step; the factor is relative to an even share
            max_tokens = math.ceil(limits.expert_capacity_factor * self.runtime.max_batched_tokens * self.model.top_k
                                   / self.model.num_experts)
        version = routing_version(limits, max_tokens)
        pending = self.engine.pending_limits
        if version in (self.engine.routing_limits.version, pending.version if pending else None):
            return
        self.engine.apply_routing_limits(EngineRoutingLimits(version, limits.topk_group, max_tokens))

    def _set_info(self) -> None:
        self.exporter.set_info(gpu_uuid=self.identity.gpu_uuid, node=self.identity.node, runtime=self.runtime.name,
                               placement_version=self.engine.placement.version)
