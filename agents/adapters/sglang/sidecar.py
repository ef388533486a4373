"""The sidecar's loop beside one SGLang server: a window of load and serving counters in, placements out.

It runs on the window grid (agents/protocol/grid.py). At start it checks the server (server_check.py), starts the
`stat` recorder once and dumps to begin a clean window. At each window's end it dumps, reads the dump (dump.py)
and reads `/metrics` (agents/adapters/serving.py). It hands one group snapshot to the agent's poster
(agents/telemetry/poster.py), which posts it and hands back the controller's answer. A dump or page of an
unexpected shape is logged with its field and SGLang's version, and that window is not posted. A dump that does
not come (the recorder stopped, or SGLang writes elsewhere) is counted as a fault, and the window is still posted
with the engine's serving counters, 0 dumps (`balancer_events`) and no tokens counted: the controller finds the
dumps stopped while the engine serves (controlplane/plan/balancer_watch.py), where a missing window would only say
the agent went stale.

The answer is applied between windows, on this thread. A new placement is checked (every expert keeps a slot)
and written where SGLang starts from (placement_store.py). The group is then restarted (restart.py), at most once
per `min_restart_seconds`. The server runs the new version once it has restarted after the file was written. A
server that restarted (for any reason) gets its recorder started again, and that window is skipped.

Live (--live), a record of a newer engine epoch says SGLang restarted (live_window.py): what was armed is gone, so
the controller's placement is armed again for the new life. The sidecar stays up through every fault: `begin` is
retried with back-off until the server answers, each window and each apply is guarded, and every failure is
counted by cause (faults.py) and logged once a cause.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import numpy as np

from agents.adapters import state_dir
from agents.adapters.errors import EngineFormatError, PlacementRefused
from agents.adapters.faults import Faults
from agents.adapters.group_window import GroupPlace, Where, group_snapshot
from agents.adapters.prom_text import Scrape, parse_metrics
from agents.adapters.serving import serving_fields
from agents.adapters.sglang import live_window
from agents.adapters.sglang.dump import window_load
from agents.adapters.sglang.dump_files import take_new_dump
from agents.adapters.sglang.location_file import location_file, running_table
from agents.adapters.sglang.model import EngineModel
from agents.adapters.sglang.names import RECORDER_DIR_ENV, SERVING
from agents.adapters.sglang.placement_store import PlacementStore, StoredPlacement
from agents.adapters.sglang.restart import Restarter
from agents.adapters.sglang.server import SGLangServer
from agents.adapters.sglang.server_check import ServerLayout, ServerRefused, check_server
from agents.protocol import Array, DesiredState, GroupSnapshot, PlacementTable, RunningPlacement

log = logging.getLogger("moectl.adapter.sglang")
MAX_BEGIN_WAIT_SECONDS = 60.0
# how long a window waits for its dump to show in the shared directory once SGLang answered the dump request (rank 0
# has written it by then: the wait is the volume's), at most half a window: a recorder that stopped must not hold
# the sidecar's windows back, or its serving windows would arrive late and few
MAX_DUMP_WAIT_SECONDS = 30.0
_FAULTS = (OSError, ValueError, KeyError, TypeError, httpx.HTTPError)  # of a window or an apply: counted, not fatal


class Sidecar:
    def __init__(self, server: SGLangServer, model: EngineModel, where: Where, dump_dir: Path, store: PlacementStore,
                 restarter: Restarter, submit: Callable[[GroupSnapshot], None], *, window_seconds: float = 10.0,
                 min_restart_seconds: float = 600.0, clock: Callable[[], float] = time.time,
                 live_dir: Path | None = None, faults: Faults | None = None,
                 max_dump_wait_seconds: float = MAX_DUMP_WAIT_SECONDS):
        """live_dir: the live plugin's directory (live_plugin.py): load from its records and placements armed
        there, applied by SGLang's own EPLB without a restart; None: dumps, files and restarts.
        max_dump_wait_seconds: a window's wait for its dump file (at most half the window)."""
        self.server, self.model, self.where, self.dump_dir = server, model, where, Path(dump_dir)
        self.store, self.restarter, self.submit, self.clock = store, restarter, submit, clock
        self.window_seconds, self.min_restart_seconds = window_seconds, min_restart_seconds
        self.max_dump_wait_seconds = max_dump_wait_seconds
        self.answers: list[DesiredState] = []
        self.lock = threading.Lock()
        self.last_restart = -float("inf")
        # a restart asked for a placement, and the server life it was asked in: what the change cost is timed from
        # the ask to the end of the first window the restarted group posts (its time without /health, its reload,
        # the window it served in again)
        self.restart_asked: tuple[float, float] | None = None
        self.faults = faults or Faults(log)
        self.desired: DesiredState | None = None  # live: the controller's newest placement, armed again on a restart
        self.position = None
        self.plugin_faults: dict[str, int] = {}  # live: the plugin's counts of SGLang's current life, as last read
        self.layout: ServerLayout | None = None
        self.live_dir = None if live_dir is None else Path(live_dir)

    @property
    def num_refused(self) -> int:
        return self.faults.total

    # -- the server ---------------------------------------------------------------------------------------
    def begin(self) -> None:
        """Checks the server, learns what it runs, starts its recorder and opens a clean window."""
        info = self.server.server_info()
        self.layout = check_server(info, self.model, is_live=self.live_dir is not None)
        self.started_at = float(info.get("startup_time") or 0.0)
        if self.live_dir is not None:  # SGLang's EPLB drives the recorder; the plugin records each rebalance
            records = state_dir.read_loads(self.live_dir, model=live_window.model_key(self.model), max_records=1,
                                           faults=self.faults)
            self.position = (records[-1]["epoch"], records[-1]["call"]) if records else None
            self.running = self._live_running()
            self.before = self._scrape()
            return
        self.running = running_table(self.store.read(), self.started_at, self.model, self.layout.num_slots)
        self.server.start_record()
        asked = time.time()  # SGLang stamps its dumps with its own time.time(), not our clock
        self.server.dump_record()  # the rows before now belong to no window of ours
        take_new_dump(self.dump_dir, after=asked - 1.0)
        self.before = self._scrape()

    def _scrape(self) -> Scrape:
        return parse_metrics(self.server.metrics(), engine="sglang", version=self.layout.version, at=self.clock())

    # -- a window -----------------------------------------------------------------------------------------
    def close_window(self, window_start: float) -> GroupSnapshot | None:
        """At the end of the window that began at `window_start`: its snapshot, handed to `submit`; None when
        nothing was posted (the server restarted, or handed us something we do not read)."""
        info = self.server.server_info()
        if float(info.get("startup_time") or 0.0) != self.started_at:
            log.info("SGLang restarted: starting its recorder again; this window is not posted")
            self.begin()
            return None
        if self.live_dir is not None:
            dump, num_dumps = self._live_dump()
        else:
            asked = time.time()
            self.server.dump_record()
            dump = take_new_dump(self.dump_dir, after=asked - 1.0,
                                 timeout=min(self.max_dump_wait_seconds, self.window_seconds / 2))
            num_dumps = int(dump is not None)
        if dump is None:  # counted, and the window posted without load: the controller watches the dumps stop
            self.faults.record("dump missing", f"no dump appeared in {self.dump_dir} (is it SGLang's "
                               f"${RECORDER_DIR_ENV}? does its recorder run?)")
        try:
            load = None if dump is None else window_load(dump, self.model, version=self.layout.version)
            after = self._scrape()
            fields = serving_fields(SERVING, self.layout.version, self.before, after)
        except EngineFormatError as exc:
            self.faults.record("window not posted", exc)
            return None
        self.before = after
        # live, every row is one whole rebalance the plugin recorded: nothing can have been overwritten
        if load is not None and load.is_truncated and self.live_dir is None:  # logged once, counted every time
            self.faults.record("recorder buffer truncated", f"the recorder's {self.layout.buffer_size} rows all "
                               "filled within the window: the oldest passes were overwritten (raise "
                               "--expert-distribution-recorder-buffer-size)")
        # the dumps the window read (live: the rebalances SGLang's EPLB recorded): the controller finds the engine's
        # balancer stalled when they stop while the serving counters say it serves (controlplane/plan/balancer_watch.py)
        fields |= {"balancer_events": num_dumps}
        layout = self.layout
        place = GroupPlace(self.where.deployment, self.where.instance, self.where.role, layout.ep_size,
                           layout.slots_per_rank, self.where.gpus_per_node)
        asked = self.restart_asked
        if asked is not None and self.started_at != asked[1] and load is not None:  # the restarted group's first
            # window with its load: the restart is the one act timed (its dump counted as one, above)
            fields |= {"balancer_stall_seconds": max(self.clock() - asked[0], 0.0)}
            self.restart_asked = None
        # without a dump no token was counted: the window's load is all zeros, which the controller reads as a
        # window without load (no imbalance, agents/protocol/placement.py), never a guess at which experts ran
        tokens = np.zeros((self.model.shape.num_layers, self.model.shape.num_experts), dtype=np.int64) \
            if load is None else load.expert_tokens
        snapshot = group_snapshot(place, self.model.shape, window_start, self.window_seconds, tokens,
                                  self.running, fields, self.faults.take_new())
        self.submit(snapshot)
        return snapshot

    # -- the controller's answer --------------------------------------------------------------------------
    def on_answer(self, answer: DesiredState) -> None:
        """The poster's callback (its thread): kept for `apply_answers`."""
        with self.lock:
            self.answers.append(answer)

    def running_placement(self, version: int) -> RunningPlacement | None:
        if version != self.running.version:
            return None
        return RunningPlacement(slot_to_expert=Array.from_numpy(self.running.slot_to_expert))

    def apply_answers(self) -> StoredPlacement | None:
        """The newest answer, applied: the placement written and a restart asked when it is new; returns what was
        written, else None."""
        with self.lock:
            answer, self.answers = (self.answers[-1] if self.answers else None), []
        if answer is None and self.live_dir is not None:
            answer = self.desired  # live: armed again when SGLang restarted (live_window.arm: once an epoch)
        if answer is None:
            return None
        if answer.window_seconds:
            self.window_seconds = answer.window_seconds
        if answer.slot_to_expert is None or answer.placement_version == self.running.version:
            return None
        if self.live_dir is not None:
            return self._arm(answer)
        now = self.clock()
        if now - self.last_restart < self.min_restart_seconds:
            log.info("placement v%d waits: the group restarted %.0f s ago (at most one restart per %.0f s)",
                     answer.placement_version, now - self.last_restart, self.min_restart_seconds)
            return None
        try:
            document = location_file(np.asarray(answer.slot_to_expert.to_numpy()), self.model, self.layout.num_slots)
        except PlacementRefused as exc:
            self.faults.record("placement refused", f"v{answer.placement_version}: {exc}")
            return None
        stored = StoredPlacement(answer.placement_version, self.running.version, now, document)
        self.store.write(stored)
        if self.restarter.restart():
            self.last_restart = now
            self.restart_asked = (now, self.started_at)
            log.info("placement v%d written; the group restarts to load it", answer.placement_version)
        return stored

    # -- live: through the plugin (live_window.py) ----------------------------------------------------------
    def _live_dump(self) -> tuple[dict, int]:
        """The rebalances recorded since the last window as one dump, and how many there were."""
        before = self.position
        dump, self.position, plugin_faults = live_window.records_as_dump(self.live_dir, self.model, self.position,
                                                                         self.faults)
        if before is not None and self.position is not None and self.position[0] != before[0]:
            self.plugin_faults = {}
            self.faults.record("engine restarted", f"SGLang's epoch {before[0]} -> {self.position[0]}: its own "
                               "layout again until the placement is re-armed")
            shape = self.model.shape
            self.running = PlacementTable.default(shape.num_layers, shape.num_experts, self.layout.num_slots)
        self.plugin_faults = self.faults.add_plugin_counts(self.plugin_faults, plugin_faults)
        self.running = self._live_running()
        # a row per record read; none read: one row of zeros, and the position did not move
        return dump, (len(dump["logical_count"]) if self.position != before else 0)

    def _live_running(self) -> PlacementTable:
        shape = self.model.shape
        otherwise = getattr(self, "running", None) or PlacementTable.default(shape.num_layers, shape.num_experts,
                                                                             self.layout.num_slots)
        return live_window.running(self.live_dir, self.model, self.position, otherwise)

    def _arm(self, answer: DesiredState) -> StoredPlacement | None:
        self.desired = answer
        if self.position is None:
            log.info("placement v%d waits: SGLang has not rebalanced yet", answer.placement_version)
            return None
        try:
            entry = live_window.arm(self.live_dir, self.model, np.asarray(answer.slot_to_expert.to_numpy()),
                                    answer.placement_version, self.layout.num_slots, self.position)
        except PlacementRefused as exc:
            self.faults.record("placement refused", f"v{answer.placement_version}: {exc}")
            return None
        if entry is None:
            return None
        log.info("placement v%d armed for SGLang's rebalance %d", entry.version, entry.from_call)
        return StoredPlacement(entry.version, self.running.version, self.clock(),
                               {"physical_to_logical_map": entry.table.tolist()})

    def run(self, stopping: threading.Event) -> None:
        """Until `stopping` is set: close each window of the grid at its end, then apply the answers."""
        from agents.protocol.grid import window_index, window_start

        wait = 1.0
        while True:
            try:
                self.begin()
                break
            except ServerRefused:
                raise  # a configuration moectl cannot work with: said once, at start
            except _FAULTS as exc:  # not up yet (SGLang loads for minutes), or a page we do not read
                self.faults.record("engine not answering", exc)
            if stopping.wait(wait):
                return
            wait = min(wait * 2, MAX_BEGIN_WAIT_SECONDS)
        while not stopping.is_set():
            seconds = self.window_seconds
            index = window_index(self.clock(), seconds)
            end = window_start(index + 1, seconds)
            if stopping.wait(max(0.0, end - self.clock())):
                return
            try:
                self.close_window(window_start(index, seconds))
            except _FAULTS as exc:  # the server is down (restarting), unreachable, or answered what we do not read
                self.faults.record("window not read", exc)
            try:
                self.apply_answers()
            except Exception as exc:  # noqa: BLE001 (a store or restart refused: a ConfigMap write, an eviction; the
                # Kubernetes client raises its own ApiException; the next answer tries again)
                self.faults.record("placement not applied", exc)
