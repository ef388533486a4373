"""The engine's thread in a worker rank: takes requests from the HTTP side, steps the engine, feeds the
agent, and hands each request's tokens (or its KV hand-off) back to the waiting HTTP handler.

All ranks of an EP group step in lockstep (every step holds collectives). So every rank steps even
with nothing to do, sleeping briefly when the whole group is idle. The ranks also agree on when to stop,
so no rank leaves the others waiting in a collective.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
import time
from dataclasses import dataclass, field

from agents.runtime.kv_transfer import KVHandoff, export_kv, import_kv
from agents.runtime.sequence import SamplingParams
from agents.runtime.stats import RequestOutput
from agents.telemetry.agent import Agent
from agents.worker.engine import ServingEngine

log = logging.getLogger("moectl.worker")


class Stream:
    """One request's results, put by the engine thread, read by an asyncio handler."""

    def __init__(self, loop: asyncio.AbstractEventLoop):
        self.loop, self.queue = loop, asyncio.Queue()

    def put(self, item: dict) -> None:
        self.loop.call_soon_threadsafe(self.queue.put_nowait, item)

    async def get(self) -> dict:
        return await self.queue.get()


@dataclass
class Command:
    kind: str  # generate | prefill | decode
    stream: Stream
    request_id: str = ""
    token_ids: list[int] = field(default_factory=list)
    params: SamplingParams | None = None
    handoff: KVHandoff | None = None


class EngineLoop:
    def __init__(self, engine: ServingEngine, agent: Agent, *, idle_seconds: float = 0.005):
        self.engine, self.agent, self.idle_seconds = engine, agent, idle_seconds
        self.inbox: queue.Queue[Command] = queue.Queue()
        self.streams: dict[str, Stream] = {}
        self.handoffs: set[str] = set()  # prefill requests whose KV leaves after the first token
        self.pending_imports: list[Command] = []
        self.load = {"num_running": 0, "num_waiting": 0, "kv_cache_usage": 0.0, "num_steps": 0}

    def submit(self, command: Command) -> None:
        self.inbox.put(command)

    def run(self, stop: threading.Event) -> None:
        group = self.engine.group
        while True:
            self._drain()
            outputs, stats = self.engine.step()
            self.agent.on_step(stats, len(self.pending_imports))
            self._deliver(outputs)
            self.agent.tick()
            self.load = {"num_running": stats.num_running, "num_waiting": stats.num_waiting + len(self.pending_imports),
                         "kv_cache_usage": stats.kv_cache_usage, "num_steps": stats.step + 1}
            is_stopping = stop.is_set()
            if group.size > 1:  # leave together: a rank alone in a collective would wait forever
                is_stopping = bool(group.agree_max([int(is_stopping)])[0])
            if is_stopping:
                return
            if self.engine.is_group_idle and self.inbox.empty():
                time.sleep(self.idle_seconds)

    def _drain(self) -> None:
        while True:
            try:
                command = self.inbox.get_nowait()
            except queue.Empty:
                break
            try:
                if command.kind in ("prefill", "decode") and not self.engine.can_hand_off_kv:
                    raise ValueError("this engine cannot hand KV off or take it over; send the request to /generate")
                if command.kind == "decode":
                    self.pending_imports.append(command)
                    continue
                self.engine.add_request(command.token_ids, command.params, command.request_id)
                self.streams[command.request_id] = command.stream
                if command.kind == "prefill":
                    self.handoffs.add(command.request_id)
            except ValueError as exc:
                command.stream.put({"error": str(exc)})
        still_pending = []
        for command in self.pending_imports:
            try:
                if import_kv(self.engine, command.handoff):
                    self.streams[command.handoff.request_id] = command.stream
                else:
                    still_pending.append(command)  # no KV room yet: the next step frees some
            except ValueError as exc:
                command.stream.put({"error": str(exc)})
        self.pending_imports = still_pending

    def _deliver(self, outputs: list[RequestOutput]) -> None:
        for out in outputs:
            stream = self.streams.get(out.request_id)
            if stream is None:
                continue
            if out.request_id in self.handoffs and out.new_token_ids and not out.is_finished:
                self.handoffs.discard(out.request_id)
                del self.streams[out.request_id]
                stream.put({"handoff": export_kv(self.engine, out.request_id).to_bytes()})
                continue
            stream.put({"token_ids": out.new_token_ids, "finished": out.is_finished,
                        "finish_reason": out.finish_reason, "num_prompt_tokens": out.num_prompt_tokens,
                        "num_cached_tokens": out.num_cached_tokens})
            if out.is_finished:
                self.handoffs.discard(out.request_id)
                del self.streams[out.request_id]
