"""One rank of a real gloo EP group for tests: the simulated engine with the agent reporting as a group
(moectl.v2), for `seconds` or until a file at STOP_PATH exists (the ranks leave together either way), then a
JSON line of what it did. Started once per rank by the test:

    PYTHONPATH=REPO:REPO/tests python -m support.group_rank RANK SIZE DIST_PORT CONTROLLER_URL SECONDS [STOP_PATH]
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import torch.distributed as dist
from prometheus_client import CollectorRegistry

from agents.runtime.ep import init_ep_group
from agents.sim.engine import SimEngine
from agents.telemetry.agent import Agent
from agents.telemetry.engine import RuntimeInfo
from agents.telemetry.poster import ControllerLink, Registration
from support.auth import AGENT_TOKEN, API_TOKEN
from support.ranks import SIM_MODEL, identity, sim_config


def main(rank: int, size: int, dist_port: int, url: str, seconds: float, stop: Path | None = None) -> None:
    group = init_ep_group(rank, size, dist_port)
    engine = SimEngine(sim_config(rank, size, seed=7), group)
    agent = Agent(engine, identity=identity(rank, size), model=SIM_MODEL, registry=CollectorRegistry(),
                  link=ControllerLink(url, AGENT_TOKEN),
                  registration=Registration(API_TOKEN, SIM_MODEL, {"mode": "auto", "cooldown_seconds": 0,
                                                                   "sustained_windows": 1,
                                                                   "change_price_margin": 0}) if rank == 0 else None,
                  window_seconds=1.0, runtime=RuntimeInfo("sim", num_speculative_tokens=2), group=group)
    deadline, num_windows, switches = time.monotonic() + seconds, 0, []
    while True:
        before = engine.placement.version
        _, stats = engine.step()
        agent.on_step(stats)
        if stats.placement_version != before:
            switches.append([engine.num_steps, stats.placement_version])
        num_windows += agent.tick() is not None
        time.sleep(0.01)
        is_done = time.monotonic() > deadline or (stop is not None and stop.exists())
        if group.agree_max([int(is_done)])[0]:  # the ranks leave together
            break
    time.sleep(1.0)  # rank 0's poster sends the last window
    # counted once the poster has stopped: a post still waiting for its answer is counted by the controller
    # already, and close() waits for that answer
    agent.close()
    print(json.dumps({"rank": rank, "windows": num_windows, "has_poster": agent.poster is not None,
                      "posted": agent.poster.num_posted if agent.poster else 0, "switches": switches,
                      "version": engine.placement.version}), flush=True)
    if size > 1:
        dist.destroy_process_group()


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], float(sys.argv[5]),
         Path(sys.argv[6]) if len(sys.argv) > 6 else None)
