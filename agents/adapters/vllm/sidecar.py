"""The sidecar beside one vLLM server (one per EP group).

Its policy's records and `vllm:*` metrics come in; one group snapshot per window of the grid goes out (over the
agent's poster). The controller's placement is handed to the plugin's endpoint (endpoint.py), which arms it for
the rearrange after next. vLLM moves the weights itself, so a
change costs no restart; it takes effect at vLLM's next rearrange but one (`EPLBConfig.step_interval` steps).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

import httpx
import numpy as np

from agents.adapters.errors import EngineFormatError
from agents.adapters.group_window import GroupPlace, Where, group_snapshot
from agents.adapters.prom_text import Scrape, parse_metrics
from agents.adapters.serving import serving_fields
from agents.adapters.vllm import names
from agents.adapters.vllm.records import layout, window_load
from agents.protocol import DesiredState, GroupSnapshot, ModelShape, PlacementTable

log = logging.getLogger("moectl.adapter.vllm")


class VllmSidecar:
    def __init__(self, client: httpx.Client, model: ModelShape, where: Where, submit: Callable[[GroupSnapshot], None],
                 *, window_seconds: float = 10.0, clock: Callable[[], float] = time.time):
        self.client, self.model, self.where, self.submit, self.clock = client, model, where, submit, clock
        self.window_seconds = window_seconds
        self.answers: list[DesiredState] = []
        self.lock = threading.Lock()
        self.tables: dict[int, np.ndarray] = {}  # the placements this sidecar armed, by version
        self.num_refused = 0

    def _get_load(self, after: int) -> dict:
        answer = self.client.get(names.LOAD_PATH, params={"after": after})
        answer.raise_for_status()
        return answer.json()

    def _scrape(self) -> Scrape:
        return parse_metrics(self.client.get("/metrics").raise_for_status().text, engine="vllm",
                             version=self.version, at=self.clock())

    def begin(self) -> bool:
        """False until vLLM has rearranged once (its first records say the group's layout)."""
        self.version = str(self.client.get("/version").raise_for_status().json().get("version", "unknown"))
        records = self._get_load(-1)["records"]
        if not records:
            return False
        self.last_call = records[-1]["call"]
        self.ep_size, self.num_slots = layout(records[-1])
        self.running = PlacementTable.default(self.model.num_layers, self.model.num_experts, self.num_slots)
        self.before = self._scrape()
        return True

    def _running(self, armed: list[dict]) -> PlacementTable:
        due = [a for a in armed if a["from_call"] <= self.last_call and a["version"] in self.tables]
        if not due:
            return self.running
        newest = max(due, key=lambda a: (a["from_call"], a["version"]))
        return PlacementTable(self.tables[newest["version"]], version=newest["version"])

    def close_window(self, window_start: float) -> GroupSnapshot | None:
        answer = self._get_load(self.last_call)
        try:
            load = window_load(answer["records"], self.model, version=self.version)
            after = self._scrape()
            fields = serving_fields(names.SERVING, self.version, self.before, after)
        except EngineFormatError as exc:
            self.num_refused += 1
            log.error("not posted: %s", exc)
            return None
        if answer["records"]:
            self.last_call = answer["records"][-1]["call"]
        self.before = after
        self.running = self._running(answer["armed"])
        place = GroupPlace(self.where.deployment, self.where.instance, self.where.role, self.ep_size,
                           self.num_slots // self.ep_size, self.where.gpus_per_node)
        snapshot = group_snapshot(place, self.model, window_start, self.window_seconds, load, self.running, fields)
        self.submit(snapshot)
        return snapshot

    def on_answer(self, answer: DesiredState) -> None:
        with self.lock:
            self.answers.append(answer)

    def apply_answers(self) -> int | None:
        """The newest answer's placement, handed to the endpoint when it is new; returns its from_call."""
        with self.lock:
            answer, self.answers = (self.answers[-1] if self.answers else None), []
        if answer is None or answer.slot_to_expert is None:
            return None
        version = answer.placement_version
        if version == self.running.version or version in self.tables:
            return None
        table = np.asarray(answer.slot_to_expert.to_numpy(), dtype=np.int64)
        posted = self.client.post(names.PLACEMENT_PATH, json={"version": version,
                                                              "physical_to_logical_map": table.tolist()})
        if posted.status_code != 200:
            self.num_refused += 1
            log.error("placement v%d refused by the plugin: %d %s", version, posted.status_code, posted.text[:300])
            return None
        self.tables[version] = table
        return int(posted.json()["from_call"])

    def run(self, stopping: threading.Event) -> None:
        from agents.protocol.grid import window_index, window_start

        while not self.begin():
            if stopping.wait(self.window_seconds):
                return
        while not stopping.is_set():
            index = window_index(self.clock(), self.window_seconds)
            if stopping.wait(max(0.0, window_start(index + 1, self.window_seconds) - self.clock())):
                return
            try:
                self.close_window(window_start(index, self.window_seconds))
                self.apply_answers()
            except (OSError, httpx.HTTPError) as exc:
                log.warning("window not read: %s", exc)
