"""Agent overhead on the engine's step, measured in one run, against its budget: the agent must never
slow serving, so its work may cost at most 2% of a step (exit status 1 when over).

The same engine decodes a batch; every step's agent work (`on_step` + `tick`: latencies, metrics,
window sums, and a window closing every 20 steps) is timed on its own, and the run alternates
blocks of steps with the agent on and off, so load changes on a shared machine hit both alike.

    OMP_NUM_THREADS=1 python -m benchmarks.agent_overhead [--steps 400] [--batch-size 8]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import torch
from prometheus_client import CollectorRegistry

from agents.protocol import Identity, ModelShape, Role
from agents.runtime.config import EngineConfig
from agents.runtime.engine import Engine
from agents.runtime.sequence import SamplingParams
from agents.telemetry.agent import Agent
from agents.telemetry.engine import RuntimeInfo
from agents.worker.build import load_model

MAX_AGENT_SHARE = 0.02  # of an engine step


def measure(num_steps: int = 200, batch_size: int = 8, block: int = 10) -> dict[str, float]:
    torch.set_num_threads(1)
    model, name = load_model("")
    engine = Engine(EngineConfig(num_speculative_tokens=2, slots_per_rank=40), model=model)
    mc = model.cfg
    shape = ModelShape(name=name, num_layers=mc.num_moe_layers, num_experts=mc.num_experts,
                       num_groups=mc.num_groups, top_k=mc.top_k, topk_group=mc.topk_group)
    identity = Identity(deployment="bench", instance="bench-0", role=Role.decode, rank=0, ep_size=1, slots_per_rank=40)
    clock = [1000.0]
    agent = Agent(engine, identity=identity, model=shape, registry=CollectorRegistry(), window_seconds=1.0,
                  runtime=RuntimeInfo(num_speculative_tokens=2), clock=lambda: clock[0])
    step_on, step_off, agent_seconds = [], [], []
    params = SamplingParams(max_tokens=mc.max_seq_len - 64)  # the batch stays busy for the whole run
    for i in range(batch_size):
        engine.add_request(f"def function_{i}(x):\n    return x * {i}\n", params)
    for i in range(num_steps):
        is_on = (i // block) % 2 == 0
        t0 = time.perf_counter()
        _, stats = engine.step()
        t1 = time.perf_counter()
        if is_on:
            agent.on_step(stats)
            clock[0] += 0.05  # a window closes every 20 steps
            agent.tick()
            agent_seconds.append(time.perf_counter() - t1)
        (step_on if is_on else step_off).append(time.perf_counter() - t0)
    step = statistics.median(step_off)
    return {"step_ms": 1000 * step, "agent_ms": 1000 * statistics.median(agent_seconds),
            "agent_mean_ms": 1000 * statistics.fmean(agent_seconds),
            "agent_share": statistics.fmean(agent_seconds) / step,
            "on_vs_off": statistics.median(step_on) / step - 1.0}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.agent_overhead", description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=400)
    p.add_argument("--batch-size", type=int, default=8)
    args = p.parse_args(argv)
    r = measure(args.steps, args.batch_size)
    print(f"engine step {r['step_ms']:.2f} ms (median, agent off); agent {r['agent_ms']:.3f} ms median, "
          f"{r['agent_mean_ms']:.3f} ms mean = {100 * r['agent_share']:.2f}% of a step; "
          f"steps with the agent on vs off: {100 * r['on_vs_off']:+.1f}%")
    if r["agent_share"] >= MAX_AGENT_SHARE:
        print(f"over budget: the agent may cost at most {100 * MAX_AGENT_SHARE:.0f}% of a step")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
