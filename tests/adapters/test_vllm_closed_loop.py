"""The vLLM adapter against a running controller: vLLM's own default EPLB policy (from the pinned wheel) wrapped by
the plugin is called as vLLM's rearrange calls it with a skewed DeepSeek-V3 load (EP8, 32 redundant experts);
the plugin's routes serve the records; the sidecar posts them, hands the controller's placement to the route, and
the rearrange after next returns it on every rank: every expert kept, its imbalance below the one measured."""

from __future__ import annotations

import time

import httpx
import numpy as np
import pytest
import torch
from fastapi import FastAPI
from fastapi.responses import PlainTextResponse
from fastapi.testclient import TestClient
from support.auth import AGENT_TOKEN, API_TOKEN, operator
from support.engines.sidecar_loop import close_next_window
from support.engines.wheels import vllm_policy_module
from support.live import running_controller

from agents.adapters.group_window import Where
from agents.adapters.sglang.model import deepseek_model
from agents.adapters.vllm.endpoint import MoectlEndpointPlugin
from agents.adapters.vllm.policy import wrap_policy
from agents.adapters.vllm.sidecar import VllmSidecar
from agents.protocol import PlacementTable, Role, replica_counts
from agents.telemetry.poster import ControllerLink, SnapshotPoster
from controlplane.config import Settings

CONFIG = {"n_routed_experts": 256, "num_hidden_layers": 61, "first_k_dense_replace": 3, "n_group": 8,
          "topk_group": 4, "num_experts_per_tok": 8}
POLICY = {"mode": "auto", "imbalance_threshold": 1.1, "sustained_windows": 1, "cooldown_seconds": 0,
          "max_moved_slots_fraction": 1.0, "max_moved_slots_per_hour_fraction": 100.0}
WINDOW = 2.0
LABELS = 'model_name="ds",engine="0"'
PAGE = f"vllm:num_requests_running{{{LABELS}}} 4\nvllm:num_requests_waiting{{{LABELS}}} 1\n"


# per MoE layer: expert of each popularity rank (the 72 hottest on the first two GPUs), inverted to rank of each expert
ORDERS = [np.argsort(np.r_[np.random.default_rng(layer).permutation(72), 72 + np.random.default_rng(99 + layer)
                           .permutation(184)]) for layer in range(58)]


def skewed_weight(rng: np.random.Generator) -> torch.Tensor:
    """[58, 256] tokens per logical expert over vLLM's load window: Zipf-skewed, each MoE layer's hot experts
    among the first 72 (the first two GPUs) and the same at every rearrange (hot experts stay hot)."""
    weights = 1.0 / np.arange(1, 257) ** 1.1
    rows = [rng.multinomial(20_000, weights / weights.sum())[order] for order in ORDERS]
    return torch.from_numpy(np.stack(rows).astype(np.int64))


def vllm_api(state_dir) -> TestClient:
    """vLLM's API server as far as the sidecar reads it: /version, /metrics, and the plugin's routes attached as
    vLLM attaches endpoint plugins (the server itself needs vLLM's CUDA build)."""
    app = FastAPI()
    app.get("/version")(lambda: {"version": "0.34.0"})
    app.get("/metrics", response_class=PlainTextResponse)(lambda: PAGE)
    MoectlEndpointPlugin(state_dir, "s3cret").attach_router(app)
    return TestClient(app, headers={"Authorization": "Bearer s3cret"})


@pytest.mark.slow
def test_skewed_load_in_the_controllers_placement_returned_by_every_rank(tmp_path):
    rng = np.random.default_rng(0)
    model = deepseek_model(CONFIG, name="deepseek-v3", engine="vllm").shape
    ranks = [wrap_policy(vllm_policy_module().DefaultEplbPolicy, tmp_path / "state", epoch="1700000000000000.a.7",
                         version="0.34.0",
                         is_recording_rank=lambda r=r: r == 0) for r in range(8)]
    current = torch.arange(288).repeat(58, 1) % 256

    def rearrange(weight: torch.Tensor) -> list[torch.Tensor]:
        return [rank.rebalance_experts(weight, 288, 8, 1, 8, current) for rank in ranks]

    settings = Settings(database_url=f"sqlite:///{tmp_path / 'moectl.db'}", api_token=API_TOKEN,
                        agent_token=AGENT_TOKEN, window_seconds=WINDOW, reconcile_seconds=0.5, warmup_windows=0)
    with running_controller(settings, run_loop=True) as controller:
        body = {"model": model.model_dump(), "policy": POLICY, "engine": "vllm"}
        assert httpx.put(f"{controller.url}/v1/deployments/ds", json=body, headers=operator()).status_code == 200
        sidecar: VllmSidecar | None = None
        poster = SnapshotPoster(ControllerLink(controller.url, AGENT_TOKEN), on_answer=lambda a: sidecar.on_answer(a),
                                on_failure=lambda reason: None)
        sidecar = VllmSidecar(vllm_api(tmp_path / "state"), model, Where("ds", "vllm-0", Role.decode), poster.submit,
                              window_seconds=WINDOW)
        poster.start()
        try:
            rearrange(skewed_weight(rng))  # vLLM's first rearrange: the layout is known
            assert sidecar.begin()
            from_call, deadline = None, time.time() + 60
            while from_call is None and time.time() < deadline:
                load = skewed_weight(rng)
                rearrange(load)  # one rearrange a window
                close_next_window(sidecar, poster, WINDOW, deadline)
                from_call = sidecar.apply_answers()
        finally:
            poster.stop()
    assert from_call is not None, "no placement came back"
    table = np.array(sidecar.tables[max(sidecar.tables)])
    # the rearranges up to from_call - 1 still return vLLM's own maps; from from_call on, every rank the table
    while ranks_calls(tmp_path) < from_call:
        rearrange(skewed_weight(rng))
    returned = rearrange(load)
    assert all(torch.equal(got, torch.from_numpy(table)) for got in returned)
    assert (replica_counts(table, 256) >= 1).all()
    before = PlacementTable.default(58, 256, 288).imbalance(load.numpy(), 8)
    after = PlacementTable(table).imbalance(load.numpy(), 8)
    print(f"measured max/mean GPU load {before:.3f}, the controller's placement on the same load {after:.3f}")
    assert after < before


def ranks_calls(tmp_path) -> int:
    """The next rearrange's call number (rank 0's records count them)."""
    from agents.adapters import state_dir as state

    return state.read_loads(tmp_path / "state")[-1]["call"] + 1
