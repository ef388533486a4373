"""An SGLang group whose expert-distribution dumps stop while it serves (its /health would still say 200): the sidecar
(agents/adapters/sglang/sidecar.py) keeps posting its windows, with the engine's serving counters from /metrics, 0
dumps and no tokens counted, and what the controller makes of those windows (controlplane/collect/aggregate.py)
is what its watchdog (controlplane/plan/balancer_watch.py) finds stalled; an idle engine without dumps is not.

SGLang's server cannot run on this machine (its kernels need a GPU: tests/support/engines/recorded_sglang.py), so
the sidecar talks over real HTTP, through its own client (agents/adapters/sglang/server.py), to a server on a
local port that answers SGLang's endpoints: /server_info with the resolved args of the pinned release, /metrics
with SGLang's page as prometheus_client writes it (tests/support/engines/pages.py, its series names checked against
the pinned source by test_sglang_source_contract.py), and each dump request, while the recorder runs, by writing a
dump in the recorder's format into the shared directory as rank 0 names it; once it stops, the request is answered
and no dump comes."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
import pytest
import torch
from support.clock import Clock
from support.engines.pages import sglang_page
from support.engines.sidecar_loop import Restarts

from agents.adapters.group_window import Where
from agents.adapters.sglang.model import deepseek_model
from agents.adapters.sglang.names import DUMP_PREFIX, DUMP_RECORD, SERVER_INFO, START_RECORD
from agents.adapters.sglang.placement_store import DirectoryStore
from agents.adapters.sglang.server import SGLangServer
from agents.adapters.sglang.sidecar import Sidecar
from agents.protocol import Role
from controlplane.collect.aggregate import group_counters
from controlplane.plan.balancer_watch import MAX_SILENT_INTERVALS, watch_balancer
from tests.support.pool_states import loop_window, pool_state

CONFIG = {"n_routed_experts": 16, "num_hidden_layers": 5, "first_k_dense_replace": 1, "n_group": 4, "topk_group": 2,
          "num_experts_per_tok": 2}
MODEL = deepseek_model(CONFIG, name="small")
INFO = {"version": "0.5.23", "enable_eplb": False, "expert_distribution_recorder_mode": "stat",
        "expert_distribution_recorder_buffer_size": 64, "ep_size": 4, "ep_num_redundant_experts": 4,
        "startup_time": 1_700_000_000.0}
WINDOW = 10.0


class EngineState:
    """What the stand-in server answers from: whether its recorder dumps, and the requests it has served."""

    def __init__(self, dump_dir: Path):
        self.dump_dir = dump_dir
        self.is_recording = True
        self.is_serving = True
        self.num_served = 0

    def page(self) -> str:
        if self.is_serving:  # each read: 10 more requests answered, 1000 more prompt tokens
            self.num_served += 10
        served = self.num_served
        return sglang_page(prompt=100 * served, cached=10 * served, ttft=(served // 2, served, served),
                           running=3 if self.is_serving else 0, queue=1 if self.is_serving else 0)

    def dump(self) -> None:
        if not self.is_recording:
            return  # the request answered, no dump written: the recorder has stopped
        buffer = np.zeros((64, 5, 16), dtype=np.int32)
        buffer[:3, 1:, 2] = 7  # three forward passes since the last dump
        self.dump_dir.mkdir(parents=True, exist_ok=True)
        torch.save({"rank": 0, "logical_count": torch.from_numpy(buffer), "average_utilization_rate_over_window": None},
                   self.dump_dir / f"{DUMP_PREFIX}{time.time()}.pt")


def _handler(engine: EngineState):
    class Handler(BaseHTTPRequestHandler):
        def _answer(self, body: str, content_type: str) -> None:
            data = body.encode()
            self.send_response(200)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):  # noqa: N802 (http.server's name)
            if self.path == SERVER_INFO:
                self._answer(json.dumps(INFO), "application/json")
            elif self.path == "/metrics":
                self._answer(engine.page(), "text/plain; version=0.0.4")
            else:
                self.send_error(404)

        def do_POST(self):  # noqa: N802
            if self.path == DUMP_RECORD:
                engine.dump()
            elif self.path != START_RECORD:
                self.send_error(404)
                return
            self._answer("", "text/plain")

        def log_message(self, *args) -> None:
            pass

    return Handler


@pytest.fixture
def engine(tmp_path):
    state = EngineState(tmp_path / "dumps")
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(state))
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    server = SGLangServer(f"http://127.0.0.1:{httpd.server_address[1]}", timeout=10)
    try:
        yield state, server
    finally:
        server.close()
        httpd.shutdown()
        httpd.server_close()


def _begun(tmp_path, server):
    """A sidecar over the engine's endpoints that has begun its first window: (sidecar, what it posted, its clock)."""
    posted, clock = [], Clock()
    sidecar = Sidecar(server, MODEL, Where("small", "g0", Role.decode), tmp_path / "dumps",
                      DirectoryStore(tmp_path / "placement"), Restarts(), posted.append, window_seconds=WINDOW,
                      clock=clock, max_dump_wait_seconds=0.5)
    sidecar.begin()
    return sidecar, posted, clock


def _windows(posted):
    """The controller's windows of those posts: their counters as its collect adds a group's rows up."""
    return [loop_window(i, s.expert_tokens.to_numpy().astype(float), s.slot_tokens.to_numpy().astype(float),
                        seconds=s.window_seconds, start=s.window_start, counters=group_counters(s.ranks))
            for i, s in enumerate(posted)]


def _watch(posted):
    table = np.zeros((4, 20), dtype=np.int64)
    state = pool_state(table, 16, _windows(posted), ep=4, num_groups=4, num_agents=4, num_fresh_agents=4)
    return watch_balancer(state, "sglang")


def _close_windows(sidecar, clock, num_windows: int) -> None:
    for _ in range(num_windows):
        clock.now += WINDOW
        sidecar.close_window(clock.now - WINDOW)


@pytest.mark.slow
def test_windows_without_a_dump_are_posted_with_the_serving_counters_and_found_stalled(tmp_path, engine):
    state, server = engine
    sidecar, posted, clock = _begun(tmp_path, server)
    _close_windows(sidecar, clock, 4)
    with_dump = posted[-1]
    assert with_dump.ranks[0].balancer_events == 1 and with_dump.expert_tokens.to_numpy()[:, 2].tolist() == [21] * 4
    assert not _watch(posted).is_stalled

    state.is_recording = False
    _close_windows(sidecar, clock, MAX_SILENT_INTERVALS + 1)
    assert len(posted) == 4 + MAX_SILENT_INTERVALS + 1  # every window posted, not a stale agent
    missing = posted[-1]
    row = missing.ranks[0]
    assert row.balancer_events == 0 and not missing.expert_tokens.to_numpy().any()  # no load made up
    assert row.requests_running == 3 and row.ttft.count == 10 and row.serving.prefill_tokens == 900
    assert posted[4].adapter_faults == {"dump missing": 1}
    assert _windows([missing])[0].is_serving  # the controller reads it as serving on the counters alone
    watch = _watch(posted)
    assert watch.is_stalled and watch.watched == "dumps" and watch.interval_seconds == pytest.approx(WINDOW)
    assert watch.num_silent_windows == MAX_SILENT_INTERVALS + 1


@pytest.mark.slow
def test_an_idle_engine_without_dumps_is_not_stalled(tmp_path, engine):
    state, server = engine
    sidecar, posted, clock = _begun(tmp_path, server)
    _close_windows(sidecar, clock, 3)
    state.is_recording = state.is_serving = False
    _close_windows(sidecar, clock, 2 * MAX_SILENT_INTERVALS)
    assert posted[-1].ranks[0].requests_running == 0 and posted[-1].ranks[0].ttft.count == 0
    assert not _watch(posted).is_stalled
