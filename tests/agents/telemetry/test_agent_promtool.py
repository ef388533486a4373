"""The agent's and the router's exposition pass `promtool check metrics` (Debian package prometheus)."""

from __future__ import annotations

import subprocess

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from support.ranks import SIM_MODEL, identity, sim_config
from support.servers import require_binary

from agents.router.metrics import RouterMetrics
from agents.sim.engine import SimEngine
from agents.telemetry.agent import Agent
from agents.telemetry.engine import RuntimeInfo


def promtool_check(text: bytes) -> subprocess.CompletedProcess:
    promtool = require_binary("promtool", "prometheus")
    return subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, timeout=30)


@pytest.fixture
def agent_text() -> bytes:
    clock = [1000.0]
    engine = SimEngine(sim_config(0, 1))
    registry = CollectorRegistry()
    agent = Agent(engine, identity=identity(0, 1), model=SIM_MODEL, registry=registry, window_seconds=1.0,
                  runtime=RuntimeInfo("sim", num_speculative_tokens=2), clock=lambda: clock[0])
    engine.add_request("hello", None, "r0")
    for _ in range(30):
        agent.on_step(engine.step()[1])
        clock[0] += 0.1
        agent.tick()
    return generate_latest(registry)


def test_agent_metrics_pass_promtool(agent_text):
    result = promtool_check(agent_text)
    assert result.returncode == 0, (result.stdout + result.stderr).decode()
    assert b"moectl_expert_load_max_to_mean_ratio{" in agent_text


def test_router_metrics_pass_promtool():
    result = promtool_check(generate_latest(RouterMetrics(CollectorRegistry()).registry))
    assert result.returncode == 0, (result.stdout + result.stderr).decode()
