"""The SGLang adapter against a running controller: SGLang's own recorder dumps of a skewed DeepSeek-V3 group
(EP8, 32 redundant experts) in, one group snapshot a window out; the controller's placement comes back, is written
as an --init-expert-location file that SGLang's own loader accepts, the group is asked to restart, and the
placement's imbalance on the measured load is below the one measured."""

from __future__ import annotations

import json
import time

import httpx
import numpy as np
import pytest
from support.auth import AGENT_TOKEN, API_TOKEN, operator
from support.engines.pages import sglang_page
from support.engines.recorded_sglang import RecordedSGLang, skewed_dumps
from support.engines.sglang_run import run_sglang
from support.engines.sidecar_loop import Restarts, close_next_window
from support.live import running_controller

from agents.adapters.group_window import Where
from agents.adapters.sglang.model import deepseek_model
from agents.adapters.sglang.placement_store import PLACEMENT_FILE, DirectoryStore
from agents.adapters.sglang.sidecar import Sidecar
from agents.protocol import PlacementTable, Role
from agents.telemetry.poster import ControllerLink, SnapshotPoster
from controlplane.config import Settings

CONFIG = {"n_routed_experts": 256, "num_hidden_layers": 61, "first_k_dense_replace": 3, "n_group": 8,
          "topk_group": 4, "num_experts_per_tok": 8}
POLICY = {"mode": "auto", "imbalance_threshold": 1.1, "sustained_windows": 1, "cooldown_seconds": 0,
          "max_moved_slots_fraction": 1.0, "max_moved_slots_per_hour_fraction": 100.0}
WINDOW = 2.0


@pytest.mark.slow
def test_skewed_load_in_a_placement_sglang_loads_out(tmp_path):
    dumps, info = skewed_dumps(tmp_path, num_windows=8)
    model = deepseek_model(CONFIG, name="deepseek-v3")
    page = sglang_page(prompt=1000, cached=100, ttft=(5, 9, 10))
    server = RecordedSGLang(info, dumps, tmp_path / "dumps", page)
    restarts = Restarts()
    store = DirectoryStore(tmp_path / "placement")
    # the adapter's loop is what is under test, not the database: SQLite
    settings = Settings(database_url=f"sqlite:///{tmp_path / 'moectl.db'}", api_token=API_TOKEN,
                        agent_token=AGENT_TOKEN, window_seconds=WINDOW, reconcile_seconds=0.5, warmup_windows=0)
    with running_controller(settings, run_loop=True) as controller:
        body = {"model": model.shape.model_dump(), "policy": POLICY, "engine": "sglang"}
        assert httpx.put(f"{controller.url}/v1/deployments/ds", json=body, headers=operator()).status_code == 200
        sidecar: Sidecar | None = None
        poster = SnapshotPoster(ControllerLink(controller.url, AGENT_TOKEN), on_answer=lambda a: sidecar.on_answer(a),
                                on_failure=lambda reason: None,
                                running_placement=lambda v: sidecar.running_placement(v))
        sidecar = Sidecar(server, model, Where("ds", "sglang-0", Role.decode), tmp_path / "dumps", store, restarts,
                          poster.submit, window_seconds=WINDOW, min_restart_seconds=0)
        poster.start()
        try:
            sidecar.begin()
            measured, written = [], None
            # a wait, not a speed target: the in-process controller solves a DeepSeek-sized table between posts,
            # and beside another suite's busy worker the first placement came back after 60 s (the action applied,
            # its answer not yet posted)
            deadline = time.time() + 180
            while written is None and server.dumps and time.time() < deadline:
                snapshot = close_next_window(sidecar, poster, WINDOW, deadline)
                measured.append(snapshot.expert_tokens.to_numpy())
                written = sidecar.apply_answers()
        finally:
            poster.stop()
    assert written is not None, "no placement came back"
    assert restarts.num_calls == 1
    load = measured[-1]
    table = np.asarray(written.document["physical_to_logical_map"])[3:]
    before = PlacementTable.default(58, 256, 288).imbalance(load, 8)
    after = PlacementTable(table).imbalance(load, 8)
    assert after < before, (before, after)
    print(f"measured max/mean GPU load {before:.3f}, the controller's placement on the same load {after:.3f}")
    meta = run_sglang("validate", str(tmp_path / "placement" / PLACEMENT_FILE), "--ep-size", "8", "--redundant", "32",
                      "--config", json.dumps(CONFIG))
    assert meta["min_replicas"] >= 1 and meta["num_physical_experts"] == 288
