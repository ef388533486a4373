"""Helpers for agent tests: an EP group of threads (no torch.distributed), a sim model shape, and a group
of simulated engines with real agents posting to a controller."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from prometheus_client import CollectorRegistry

from agents.protocol import Identity, ModelShape, Role
from agents.sim.engine import SimConfig, SimEngine
from agents.telemetry.agent import Agent
from agents.telemetry.engine import RuntimeInfo
from agents.telemetry.poster import ControllerLink, Registration
from support.auth import AGENT_TOKEN, API_TOKEN

SIM_MODEL = ModelShape(name="sim-tiny", num_layers=4, num_experts=32, num_groups=4, top_k=4, topk_group=2)


class ThreadGroup:
    """Ranks in threads of one process; agree_max is an all-reduce(MAX) through a barrier."""

    def __init__(self, size: int):
        self.size = size
        self.barrier = threading.Barrier(size, timeout=30)
        self.values: list[list[int] | None] = [None] * size

    def rank(self, rank: int) -> ThreadRank:
        return ThreadRank(self, rank)


class ThreadRank:
    def __init__(self, group: ThreadGroup, rank: int):
        self.group, self.rank, self.size = group, rank, group.size

    def agree_max(self, values: list[int]) -> list[int]:
        self.group.values[self.rank] = list(values)
        self.group.barrier.wait()
        result = [max(column) for column in zip(*self.group.values, strict=True)]
        self.group.barrier.wait()  # nobody overwrites values before everyone has read them
        return result


def slots_per_rank(ep_size: int) -> int:
    return 40 // ep_size  # 32 experts and 8 spare slots for replicas


def sim_config(rank: int, ep_size: int, **overrides) -> SimConfig:
    return SimConfig(ep_size=ep_size, ep_rank=rank, slots_per_rank=slots_per_rank(ep_size), is_paced=False,
                     **overrides)


def identity(rank: int, ep_size: int, deployment: str = "tiny", role: Role = Role.decode) -> Identity:
    return Identity(deployment=deployment, instance=f"{deployment}-{role.value}-0", role=role, rank=rank,
                    ep_size=ep_size, slots_per_rank=slots_per_rank(ep_size), node="test-node", gpu_uuid=f"GPU-{rank}")


EP_SIZE = 2


def run_group(agents: list[Agent], engines: list[SimEngine], seconds: float, switched: list, *,
              until: Callable[[], bool] | None = None, max_extra_seconds: float = 30.0) -> None:
    """Every rank steps in its own thread, in lockstep through the group's agreement, for `seconds`; with `until`,
    on past them until it holds (at most `max_extra_seconds` more: a loaded machine posts later, not never)."""
    stop = time.monotonic() + seconds

    def is_done() -> bool:
        now = time.monotonic()
        return now > stop and (until is None or now > stop + max_extra_seconds or until())

    def loop(rank: int) -> None:
        engine, agent = engines[rank], agents[rank]
        while True:
            is_last = rank == 0 and is_done()
            before = engine.placement.version
            _, stats = engine.step()
            agent.on_step(stats)
            if stats.placement_version != before:
                switched.append((rank, engine.num_steps, stats.placement_version))
            agent.tick()
            time.sleep(0.01)
            # ranks leave together: rank 0 decides, the others follow through the agreement
            if engine.group.agree_max([int(is_last)])[0]:
                return

    threads = [threading.Thread(target=loop, args=(r,)) for r in range(len(engines))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=seconds + max_extra_seconds + 30)


def make_group(url: str, *, api_token: str = API_TOKEN, link: ControllerLink | None = None, clock=time.time):
    """link: the ranks' (default: `url` with the agents' token)."""
    group = ThreadGroup(EP_SIZE)
    engines = [SimEngine(sim_config(r, EP_SIZE, seed=7), group=group.rank(r)) for r in range(EP_SIZE)]
    agents = [Agent(engines[r], identity=identity(r, EP_SIZE), model=SIM_MODEL, registry=CollectorRegistry(),
                    link=link or ControllerLink(url, AGENT_TOKEN),
                    registration=Registration(api_token, SIM_MODEL, {"mode": "auto", "cooldown_seconds": 0,
                                                                         "sustained_windows": 1,
                                                                         "change_price_margin": 0}) if r == 0 else None,
                    window_seconds=1.0, runtime=RuntimeInfo("sim", num_speculative_tokens=2), clock=clock)
              for r in range(EP_SIZE)]
    return engines, agents
