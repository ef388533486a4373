"""`moectl sim`: a simulated fleet in real time against a controller URL.

  python -m agents.sim --url http://127.0.0.1:8600 --api-token T --agent-token A [--windows N]
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import threading
import time

import httpx

from agents.protocol.grid import window_index, window_start
from agents.sim.cost import LINKS
from agents.sim.fleet import FleetClient, make_fleet

log = logging.getLogger("moectl.sim")


def run_sim(*, url: str, api_token: str, agent_token: str, num_deployments: int, ep_size: int,
            slots_per_rank: int, window_seconds: float, mode: str, num_windows: int = 0,
            stop: threading.Event | None = None, gpus_per_node: int = 8, links: str = "gpu-nodes") -> int:
    if not api_token or not agent_token:
        print("error: the simulated fleet needs --api-token and --agent-token (printed by `moectl serve`)")
        return 2
    stop = stop or threading.Event()
    fleet = make_fleet(num_deployments, ep_size, slots_per_rank, gpus_per_node=gpus_per_node, links=LINKS[links])
    with httpx.Client(base_url=url, timeout=30) as client:
        fleet_client = FleetClient(client, api_token=api_token, agent_token=agent_token)
        fleet_client.register(fleet, policy={"mode": mode, "cooldown_seconds": 3 * window_seconds})
        log.info("simulating %d deployments x %d ranks, %.1fs windows", num_deployments, ep_size, window_seconds)
        index = window_index(time.time(), window_seconds)
        count = 0
        while not stop.is_set() and (num_windows == 0 or count < num_windows):
            # post window `index` once it has ended, on the controller's grid
            end = window_start(index + 1, window_seconds)
            if stop.wait(max(0.0, end - time.time())):
                break
            try:
                fleet_client.post_window(fleet, window_start(index, window_seconds), window_seconds)
            except httpx.HTTPError as exc:
                log.warning("controller unreachable (%s); retrying next window", exc)
            index, count = index + 1, count + 1
    return 0


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="moectl sim", description="run a simulated fleet against a controller")
    p.add_argument("--url", default="http://127.0.0.1:8600", help="controller URL")
    p.add_argument("--api-token", default=os.environ.get("MOECTL_API_TOKEN", ""),
                   help="operator token, to register deployments (or MOECTL_API_TOKEN)")
    p.add_argument("--agent-token", default=os.environ.get("MOECTL_AGENT_TOKEN", ""),
                   help="agent token, to post snapshots (or MOECTL_AGENT_TOKEN)")
    p.add_argument("--deployments", type=int, default=2)
    p.add_argument("--ep-size", type=int, default=8)
    p.add_argument("--slots-per-rank", type=int, default=10)
    p.add_argument("--gpus-per-node", type=int, default=8, help="ranks per node: tokens cross the network between")
    p.add_argument("--links", choices=sorted(LINKS), default="gpu-nodes",
                   help="what the all-to-all crosses (agents/sim/cost.py): NVLink and a network, or loopback gloo")
    p.add_argument("--window-seconds", type=float, default=2.0)
    p.add_argument("--mode", choices=["off", "observe", "approve", "auto"], default="auto",
                   help="policy mode the simulated deployments are registered with")
    p.add_argument("--windows", type=int, default=0, help="stop after this many windows (0: run until Ctrl-C)")
    p.add_argument("-v", "--verbose", action="store_true", help="log debug detail")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.Formatter.converter = time.gmtime
    logging.getLogger("httpx").setLevel(logging.DEBUG if args.verbose else logging.WARNING)
    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):  # finish the window being posted, then leave
        signal.signal(signum, lambda *_: stop.set())
    return run_sim(url=args.url, api_token=args.api_token, agent_token=args.agent_token,
                   num_deployments=args.deployments, ep_size=args.ep_size, slots_per_rank=args.slots_per_rank,
                   window_seconds=args.window_seconds, mode=args.mode, num_windows=args.windows, stop=stop,
                   gpus_per_node=args.gpus_per_node, links=args.links)
