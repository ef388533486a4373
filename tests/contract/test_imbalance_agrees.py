"""The agent's imbalance gauge and the controller's window imbalance are one number for one window.

Every rank of an EP group routes the same tokens, so each slot processes exactly what the agent's
estimate assumes (ep_size x its expert's tokens x its share). The window goes through the agent's
path (window builder, gauge, exporter) on every rank, and each rank's snapshot through the controller's
(HTTP, validation, aggregation, store, `Window.imbalance`); the two sides must agree, the layer that
routed nothing included.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from prometheus_client import CollectorRegistry
from support.auth import agent, operator

from agents.protocol import Identity, ModelShape, Role
from agents.runtime.stats import MoECounters, StepStats
from agents.sim.engine import SimConfig, SimEngine
from agents.telemetry.agent import Agent

EP_SIZE, SLOTS_PER_RANK, WINDOW_SECONDS = 4, 3, 10.0
MODEL = ModelShape(name="contract", num_layers=3, num_experts=8, num_groups=2, top_k=2)
# [L, E] tokens each rank routes per step; layer 2 routes nothing, and every expert's tokens split evenly
# over its (at most two) replicas, so each slot's tokens are whole
ROUTED = np.array([[16, 4, 2, 2, 6, 2, 8, 2], [2, 2, 2, 12, 2, 2, 2, 4], [0] * 8], dtype=np.int64)


def step_stats(engine: SimEngine, rank: int, index: int, now: float) -> StepStats:
    moe = MoECounters.zeros(MODEL.num_layers, MODEL.num_experts, SLOTS_PER_RANK, "cpu")
    moe.expert_tokens += torch.from_numpy(ROUTED)
    table = engine.placement.slot_to_expert.numpy()
    replicas = np.stack([np.bincount(row, minlength=MODEL.num_experts) for row in table])
    # what this rank's slots receive from the whole group: the hand-made truth the two sides are judged on
    group = np.take_along_axis(ROUTED * EP_SIZE, table, axis=1) // np.take_along_axis(replicas, table, axis=1)
    moe.slot_tokens += torch.from_numpy(group[:, rank * SLOTS_PER_RANK:(rank + 1) * SLOTS_PER_RANK])
    return StepStats(step=index, timestamp=now, is_prefill=False, num_scheduled_tokens=8, num_running=1,
                     num_waiting=0, num_preempted=0, kv_cache_usage=0.1, forward_seconds=0.01, step_seconds=0.01,
                     moe=moe, placement_version=engine.placement.version)


@pytest.fixture
def registered(client):
    response = client.put(f"/v1/deployments/{MODEL.name}", json={"model": MODEL.model_dump()}, headers=operator())
    assert response.status_code == 200, response.text


def test_the_agents_gauge_is_the_controllers_window_imbalance(client, clock, registered):
    start = clock.now - WINDOW_SECONDS
    gauges = []
    for rank in range(EP_SIZE):
        engine = SimEngine(SimConfig(num_layers=MODEL.num_layers, num_experts=MODEL.num_experts,
                                     num_groups=MODEL.num_groups, top_k=MODEL.top_k, topk_group=1, ep_size=EP_SIZE,
                                     ep_rank=rank, slots_per_rank=SLOTS_PER_RANK, is_paced=False))
        identity = Identity(deployment=MODEL.name, instance="contract-decode-0", role=Role.decode, rank=rank,
                            ep_size=EP_SIZE, slots_per_rank=SLOTS_PER_RANK)
        registry = CollectorRegistry()
        rank_agent = Agent(engine, identity=identity, model=MODEL, registry=registry, window_seconds=WINDOW_SECONDS,
                           clock=lambda: start)
        for index in range(3):
            rank_agent.on_step(step_stats(engine, rank, index, start + index))
        closed = rank_agent.tick(now=clock.now)
        assert closed is not None and closed.snapshot.window_start == start
        gauges.append(registry.get_sample_value("moectl_expert_gpu_load_max_to_mean_ratio",
                                                {"deployment": MODEL.name, "role": "decode", "ep_rank": str(rank)}))
        response = client.post("/v1/agents/snapshot", content=closed.snapshot.model_dump_json(),
                               headers=agent() | {"Content-Type": "application/json"})
        assert response.status_code == 200, response.text

    clock.now += WINDOW_SECONDS / 2 + 1  # the window is complete once half a window has passed its end
    history = client.get(f"/v1/deployments/{MODEL.name}/overview").json()["pools"][0]["history"]
    assert [point["start"] for point in history] == [start]
    measured = history[-1]["imbalance"]
    # GPU loads per step (version-0 table, ep_size x routed tokens): layer 0 [44, 36, 72, 16], layer 1
    # [12, 40, 28, 32]; layer 2 is left out of the mean, not counted as balanced
    assert measured == pytest.approx((72 / 42 + 40 / 28) / 2)
    assert gauges == [pytest.approx(measured, rel=1e-12)] * EP_SIZE
