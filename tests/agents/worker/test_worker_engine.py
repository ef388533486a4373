"""Both engines meet the typed surfaces the agent (agents/telemetry/engine.py) and the worker's engine loop
(agents/worker/engine.py) use; the loop refuses a KV hand-off an engine cannot do, with a clear error."""

from __future__ import annotations

import asyncio
import threading

import pytest
import torch
from prometheus_client import CollectorRegistry
from support.ranks import SIM_MODEL, identity, sim_config

from agents.runtime.config import EngineConfig, ModelConfig
from agents.runtime.engine import Engine
from agents.runtime.model import Transformer
from agents.runtime.sequence import SamplingParams
from agents.sim.engine import SimEngine
from agents.telemetry.agent import Agent
from agents.telemetry.engine import AgentEngine
from agents.worker.engine import ServingEngine
from agents.worker.engine_loop import Command, EngineLoop, Stream


@pytest.fixture(scope="module")
def real_engine() -> Engine:
    torch.manual_seed(0)
    return Engine(EngineConfig(slots_per_rank=40, num_kv_blocks=16), model=Transformer(ModelConfig(max_seq_len=128)))


def test_the_runtime_and_the_simulated_engine_meet_the_agent_and_the_worker(real_engine):
    sim = SimEngine(sim_config(0, 1))
    for engine in (real_engine, sim):
        assert isinstance(engine, AgentEngine) and isinstance(engine, ServingEngine), type(engine)
    assert real_engine.can_hand_off_kv and not sim.can_hand_off_kv


def test_an_engine_without_staging_is_not_one_the_agent_can_run_on():
    class ReadOnly:
        placement = SimEngine(sim_config(0, 1)).placement
        routing_limits = pending_limits = None

        def step(self):
            return [], None

    assert not isinstance(ReadOnly(), AgentEngine) and not isinstance(ReadOnly(), ServingEngine)


def test_the_loop_refuses_a_kv_hand_off_on_an_engine_without_kv():
    engine = SimEngine(sim_config(0, 1))
    agent = Agent(engine, identity=identity(0, 1), model=SIM_MODEL, registry=CollectorRegistry())
    loop = EngineLoop(engine, agent)

    async def answers() -> list[dict]:
        streams = [Stream(asyncio.get_running_loop()) for _ in range(3)]
        for kind, stream in zip(("prefill", "decode", "generate"), streams, strict=True):
            loop.submit(Command(kind, stream, request_id=kind, token_ids=[104, 105],
                                params=SamplingParams(max_tokens=1)))
        stop = threading.Event()
        stop.set()  # one step, then leave
        await asyncio.to_thread(loop.run, stop)
        return [await asyncio.wait_for(stream.get(), 5) for stream in streams]

    prefill, decode, generate = asyncio.run(answers())
    assert "cannot hand KV off" in prefill["error"] and "cannot hand KV off" in decode["error"]
    assert generate["token_ids"] and generate["finished"]
