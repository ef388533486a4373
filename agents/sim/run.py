"""`moectl sim`: a simulated fleet in real time against a controller URL."""

from __future__ import annotations

import logging
import math
import threading
import time

import httpx

from controlplane.sim.fleet import FleetClient, make_fleet

log = logging.getLogger("moectl.sim")


def run_sim(*, url: str, api_token: str, agent_token: str, num_deployments: int, ep_size: int,
            slots_per_rank: int, window_seconds: float, mode: str, num_windows: int = 0,
            stop: threading.Event | None = None) -> int:
    if not api_token or not agent_token:
        print("error: the simulated fleet needs --api-token and --agent-token (printed by `moectl serve`)")
        return 2
    stop = stop or threading.Event()
    fleet = make_fleet(num_deployments, ep_size, slots_per_rank)
    with httpx.Client(base_url=url, timeout=30) as client:
        fleet_client = FleetClient(client, api_token=api_token, agent_token=agent_token)
        fleet_client.register(fleet, policy={"mode": mode, "cooldown_seconds": 3 * window_seconds})
        log.info("simulating %d deployments x %d ranks, %.1fs windows", num_deployments, ep_size, window_seconds)
        index = math.floor(time.time() / window_seconds)
        count = 0
        while not stop.is_set() and (num_windows == 0 or count < num_windows):
            # post window `index` once it has ended, on the controller's grid
            end = (index + 1) * window_seconds
            if stop.wait(max(0.0, end - time.time())):
                break
            try:
                fleet_client.post_window(fleet, index * window_seconds, window_seconds)
            except httpx.HTTPError as exc:
                log.warning("controller unreachable (%s); retrying next window", exc)
            index, count = index + 1, count + 1
    return 0
