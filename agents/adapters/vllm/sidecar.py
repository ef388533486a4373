"""The sidecar beside one vLLM server (one per EP group).

Its policy's records and `vllm:*` metrics come in; one group snapshot per window of the grid goes out (over the
agent's poster). The controller's placement is handed to the plugin's endpoint (endpoint.py), which arms it for
the rearrange after next. vLLM moves the weights itself, so a change costs no restart; it takes effect at vLLM's
next rearrange but one (`EPLBConfig.step_interval` steps).

It reads the records of its model only (the main model's shape: an MTP drafter's are keyed apart, state_dir.py),
from where it stopped: a position (epoch, call). A record of a newer epoch means vLLM restarted: vLLM runs its own
map again and what was armed is gone, so the running placement is reset and the controller's placement re-armed
for the new life. A record it cannot read is counted and passed over: it never blocks the stream. Every failure
(engine down, a page it does not read, a refused placement, a state file the routes could not read) is
counted by cause (faults.py); the loop goes on.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable

import httpx
import numpy as np

from agents.adapters import state_dir as state
from agents.adapters.errors import EngineFormatError
from agents.adapters.faults import Faults
from agents.adapters.group_window import GroupPlace, Where, group_snapshot
from agents.adapters.prom_text import Scrape, parse_metrics
from agents.adapters.serving import serving_fields
from agents.adapters.vllm import names
from agents.adapters.vllm.count_window import Cumulative, cumulative, window_counts
from agents.adapters.vllm.records import layout, window_load
from agents.protocol import Array, DesiredState, GroupSnapshot, ModelShape, PlacementTable, RunningPlacement

log = logging.getLogger("moectl.adapter.vllm")
MAX_TABLES = 8  # versions whose tables are kept, to say which one runs (the newest armed are at most MAX_ARMED)
MAX_BEGIN_WAIT_SECONDS = 60.0


class VllmSidecar:
    def __init__(self, client: httpx.Client, model: ModelShape, where: Where, submit: Callable[[GroupSnapshot], None],
                 *, window_seconds: float = 10.0, clock: Callable[[], float] = time.time, faults: Faults | None = None):
        self.client, self.model, self.where, self.submit, self.clock = client, model, where, submit, clock
        self.window_seconds = window_seconds
        self.answers: list[DesiredState] = []
        self.lock = threading.Lock()
        self.tables: OrderedDict[int, np.ndarray] = OrderedDict()  # the placements this sidecar armed, by version
        self.armed: set[tuple[str, int]] = set()  # (epoch, version) armed by us
        self.desired: tuple[int, np.ndarray] | None = None  # the controller's newest placement
        self.faults = faults or Faults(log)
        self.model_key = state.model_key(model.num_layers, model.num_experts)
        self.position: state.Position | None = None
        self.plugin_faults: dict[str, int] = {}  # the plugin's counts of the current engine life, as last read
        self.endpoint_faults: dict[str, int] = {}  # the routes' counts (a torn or planted state file they read)
        self.counts_before: Cumulative | None = None  # the workers' counts at the last window's close
        self.num_gaps = 0  # windows not posted because the engine could not be read at their start or end

    @property
    def num_refused(self) -> int:
        return self.faults.total

    def _get_load(self, after: state.Position | None, limit: int = state.MAX_LOADS) -> dict:
        params: dict = {"model": self.model_key, "limit": limit}
        if after is not None:
            params |= {"after_epoch": after[0], "after": after[1]}
        answer = self.client.get(names.LOAD_PATH, params=params).raise_for_status().json()
        if not isinstance(answer, dict) or not isinstance(answer.get("records"), list):
            raise EngineFormatError("vllm", getattr(self, "version", "?"), names.LOAD_PATH,
                                    "not the moectl plugin's answer (is VLLM_PLUGINS=moectl set?)")
        return answer

    def _read_counts(self) -> Cumulative | None:
        """The workers' cumulative counts (count_route.py); None from a plugin without counting (404)."""
        answer = self.client.get(names.COUNTS_PATH)
        if answer.status_code == 404:
            return None
        answer.raise_for_status()
        workers = answer.json()["workers"]
        return cumulative(workers, self.model, version=self.version) if workers else None

    def _count_load(self) -> np.ndarray | None:
        """The window's per-expert load counted in the workers; None where nothing counts, or where the window's
        start was not read (self.counts_before None: the caller reports a gap)."""
        after = self._read_counts()
        before, self.counts_before = self.counts_before, after
        if after is None or before is None:
            return None
        return window_counts(before, after)

    def _scrape(self) -> Scrape:
        return parse_metrics(self.client.get("/metrics").raise_for_status().text, engine="vllm",
                             version=self.version, at=self.clock())

    def begin(self) -> bool:
        """False until vLLM answers and either has rearranged once (its first records say the group's layout) or
        its workers have counted (no EPLB: the experts' own slots, one replica each)."""
        answer = self.client.get("/version").raise_for_status().json()
        self.version = str(answer.get("version", "unknown")) if isinstance(answer, dict) else "unknown"
        records = self._get_load(None, limit=1)["records"]
        self.counts_before = self._read_counts()
        if records:
            self.position = (records[-1]["epoch"], records[-1]["call"])
            self.ep_size, self.num_slots = layout(records[-1])
        elif self.counts_before is not None and self.counts_before.by_rank:
            self.position = None
            self.ep_size, self.num_slots = self.counts_before.ep_size, self.model.num_experts
        else:
            return False
        self.running = self._default()
        self.before = self._scrape()
        return True

    def _default(self) -> PlacementTable:
        return PlacementTable.default(self.model.num_layers, self.model.num_experts, self.num_slots)

    def _running(self, armed: list[dict]) -> PlacementTable:
        if self.position is None:
            return self.running  # vLLM has not rearranged: its own experts' slots
        epoch, call = self.position
        due = [a for a in armed if a.get("epoch") == epoch and a.get("model") == self.model_key
               and a.get("from_call", call + 1) <= call and a.get("version") in self.tables]
        if not due:
            return self.running
        newest = max(due, key=lambda a: (a["from_call"], a["version"]))
        return PlacementTable(self.tables[newest["version"]], version=newest["version"])

    def close_window(self, window_start: float) -> GroupSnapshot | None:
        answer = self._get_load(self.position)
        records = answer["records"]
        self.endpoint_faults = self.faults.add_plugin_counts(self.endpoint_faults, answer.get("faults"), "endpoint")
        if records and self.position is not None and records[-1]["epoch"] != self.position[0]:
            log.warning("vLLM restarted (epoch %s -> %s): it runs its own map until the placement is re-armed",
                        self.position[0], records[-1]["epoch"])
            self.faults.record("engine restarted", f"epoch {records[-1]['epoch']}")
            self.running = self._default()
            self.plugin_faults = {}
        if records:  # passed over even when refused below: a bad record never blocks the stream
            self.position = (records[-1]["epoch"], records[-1]["call"])
            self.plugin_faults = self.faults.add_plugin_counts(self.plugin_faults, records[-1].get("faults"))
        try:
            load = window_load(records, self.model, version=self.version)
            counted = self._count_load()
            if counted is None and self.counts_before is not None:
                self.num_gaps += 1
                log.warning("window %.0f not posted: the counts at its start were not read (a gap, not zeros)",
                            window_start)
                return None
            if counted is not None:
                load = counted  # every step's routing; the EPLB records keep their role in placement (records.py)
            after = self._scrape()
            # the rearranges vLLM recorded in the window (the controller watches that its EPLB keeps acting) and the
            # seconds its policy's calls took, where the plugin timed them (what a change costs, in part; a record
            # carries the call before it: the record is written as its own call starts)
            timed = [float(r["previous_seconds"]) for r in records
                     if isinstance(r.get("previous_seconds"), int | float)]
            fields = serving_fields(names.SERVING, self.version, self.before, after) | {"balancer_events": len(records)}
            if timed:  # a record of an older plugin (untimed) counts at the mean of the timed ones
                fields["balancer_stall_seconds"] = sum(timed) / len(timed) * len(records)
        except EngineFormatError as exc:
            self.faults.record("window not posted", exc)
            return None
        self.before = after
        self.running = self._running(answer.get("armed") or [])
        place = GroupPlace(self.where.deployment, self.where.instance, self.where.role, self.ep_size,
                           self.num_slots // self.ep_size, self.where.gpus_per_node)
        snapshot = group_snapshot(place, self.model, window_start, self.window_seconds, load, self.running, fields,
                                  self.faults.take_new())
        self.submit(snapshot)
        return snapshot

    def on_answer(self, answer: DesiredState) -> None:
        with self.lock:
            self.answers.append(answer)

    def running_placement(self, version: int) -> RunningPlacement | None:
        """The table vLLM runs when it runs `version` (the poster's answer to a controller that lost it)."""
        if version != self.running.version:
            return None
        return RunningPlacement(slot_to_expert=Array.from_numpy(self.running.slot_to_expert))

    def apply_answers(self) -> int | None:
        """The controller's newest placement, handed to the endpoint when vLLM's current life has not had it;
        returns its from_call."""
        with self.lock:
            answer, self.answers = (self.answers[-1] if self.answers else None), []
        if answer is not None and answer.slot_to_expert is not None:
            self.desired = (answer.placement_version, np.asarray(answer.slot_to_expert.to_numpy(), dtype=np.int64))
        if self.desired is None or self.position is None:
            return None
        version, table = self.desired
        if version == self.running.version or (self.position[0], version) in self.armed:
            return None
        posted = self.client.post(names.PLACEMENT_PATH, json={"version": version, "model": self.model_key,
                                                              "physical_to_logical_map": table.tolist()})
        if posted.status_code != 200:
            self.faults.record(f"placement refused ({posted.status_code})", f"v{version}: {posted.text[:300]}")
            self.armed.add((self.position[0], version))  # not posted again in this life: it would be refused again
            return None
        answer = posted.json()
        self.armed = {(e, v) for e, v in self.armed if e == answer["epoch"]} | {(answer["epoch"], version)}
        self.tables[version] = table
        while len(self.tables) > MAX_TABLES:
            self.tables.popitem(last=False)
        return int(answer["from_call"])

    def run(self, stopping: threading.Event) -> None:
        """Until `stopping`: wait for vLLM (backing off to MAX_BEGIN_WAIT_SECONDS), then close each window of the
        grid and apply the answers; every failure counted and logged once a cause, never fatal."""
        from agents.protocol.grid import window_index, window_start

        wait = 1.0
        while True:
            try:
                if self.begin():
                    break
            except (OSError, ValueError, httpx.HTTPError) as exc:  # not up yet (vLLM loads for minutes)
                self.faults.record("engine not answering", exc)
            if stopping.wait(wait):
                return
            wait = min(wait * 2, MAX_BEGIN_WAIT_SECONDS)
        while not stopping.is_set():
            index = window_index(self.clock(), self.window_seconds)
            if stopping.wait(max(0.0, window_start(index + 1, self.window_seconds) - self.clock())):
                return
            try:
                self.close_window(window_start(index, self.window_seconds))
            except (OSError, ValueError, KeyError, TypeError, httpx.HTTPError) as exc:
                self.counts_before, self.num_gaps = None, self.num_gaps + 1  # the next window is not posted either
                self.faults.record("window not read", exc)
            try:
                self.apply_answers()
            except (OSError, ValueError, KeyError, TypeError, httpx.HTTPError) as exc:
                self.faults.record("placement not handed over", exc)
