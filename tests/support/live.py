"""A real controller (uvicorn, and the reconcile loop if asked) on a free port, a simulated fleet posting
to it on the real clock, and many HTTP callers released at once: for tests of concurrency and faults."""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import TypeVar

import httpx

from agents.sim.fleet import SimInstance, make_fleet
from agents.sim.fleet_client import FleetClient
from controlplane.cmd.serve import Controller
from controlplane.config import Settings
from support.auth import AGENT_TOKEN, API_TOKEN
from support.servers import free_port

T = TypeVar("T")


@contextmanager
def running_controller(settings: Settings, *, run_loop: bool = False) -> Iterator[Controller]:
    """Without its loop the controller is the only writer (no election: a replica without a loop never leads)."""
    update = {"port": free_port()} | ({} if run_loop else {"leader_election": False})
    controller = Controller(settings.model_copy(update=update), run_loop=run_loop)
    thread = controller.start()
    try:
        yield controller
    finally:
        controller.stop()
        thread.join(timeout=30)


def live_fleet(url: str, policy: dict, *, num_windows: int, window_seconds: float,
               seed: int = 3) -> list[SimInstance]:
    """Registers one simulated EP group of 8 ranks (Zipf-skewed load, max/mean ~2) and posts `num_windows`
    complete windows on the controller's grid, the last ending a window before now."""
    fleet = make_fleet(num_deployments=1, ep_size=8, slots_per_rank=10, seed=seed)
    with httpx.Client(base_url=url, timeout=30) as client:
        fleet_client = FleetClient(client, api_token=API_TOKEN, agent_token=AGENT_TOKEN)
        fleet_client.register(fleet, policy=policy)
        last = (math.floor(time.time() / window_seconds) - 2) * window_seconds
        for k in range(num_windows):
            fleet_client.post_window(fleet, last - (num_windows - 1 - k) * window_seconds, window_seconds)
    return fleet


def at_once(call: Callable[[int], T], num_calls: int, *, num_threads: int) -> list[T]:
    """call(0..num_calls-1) from `num_threads` threads; the first round starts together (a barrier)."""
    barrier = threading.Barrier(min(num_threads, num_calls))

    def run(i: int) -> T:
        if i < barrier.parties:
            barrier.wait(timeout=60)
        return call(i)

    with ThreadPoolExecutor(num_threads) as pool:
        return list(pool.map(run, range(num_calls)))
