"""`moectl sim`: a simulated fleet in real time against a controller URL.

`--model sim-moe-64e` (the default) runs `--deployments` small decode pools. A model of agents/sim/models.py with
prefill and decode pools (`deepseek-v3`: EP32 and EP320) runs one deployment of that model with the instances
asked for. Each instance posts one group snapshot per window (`--protocol v2`) or one snapshot per rank (`v1`,
as agents before moectl.v2 do; at DeepSeek scale the simulator itself cannot build 1,024 snapshots a window).

Examples:

  python -m agents.sim --url http://127.0.0.1:8600 --api-token T --agent-token A [--windows N]
  python -m agents.sim --model deepseek-v3 --prefill-instances 2 --decode-instances 3 ...   # 1,024 GPUs
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import threading
import time

import httpx

from agents.protocol import Role
from agents.protocol.grid import window_index, window_start
from agents.sim.cost import LINKS
from agents.sim.fleet import SimInstance, layout_fleet, make_fleet
from agents.sim.fleet_client import FleetClient
from agents.sim.models import MODELS

log = logging.getLogger("moectl.sim")


def build_fleet(args: argparse.Namespace) -> list[SimInstance]:
    """The fleet the flags ask for: small decode pools of the default model, or one deployment of a named
    model's layout with the prefill and decode instances asked for."""
    layout = MODELS[args.model]
    if args.model == "sim-moe-64e":
        return make_fleet(args.deployments, args.ep_size, args.slots_per_rank, layout.model,
                          gpus_per_node=args.gpus_per_node, links=LINKS[args.links])
    layout = layout.with_instances(Role.prefill, args.prefill_instances)
    return layout_fleet(layout.with_instances(Role.decode, args.decode_instances), deployment=args.model)


def run_sim(fleet_client: FleetClient, fleet: list[SimInstance], *, window_seconds: float, mode: str,
            num_windows: int, stop: threading.Event) -> None:
    """Registers the fleet's deployments with `mode`, then posts each window once it ended, on the controller's
    grid, until `stop` or `num_windows` windows (0: no end)."""
    fleet_client.register(fleet, policy={"mode": mode, "cooldown_seconds": 3 * window_seconds})
    log.info("simulating %s: %d instances, %d GPUs, %.1fs windows, protocol %s",
             ", ".join(sorted({i.deployment for i in fleet})), len(fleet), sum(i.ep_size for i in fleet),
             window_seconds, fleet_client.protocol)
    index = window_index(time.time(), window_seconds)
    count = 0
    while not stop.is_set() and (num_windows == 0 or count < num_windows):
        end = window_start(index + 1, window_seconds)
        if stop.wait(max(0.0, end - time.time())):
            break
        try:
            fleet_client.post_window(fleet, window_start(index, window_seconds), window_seconds)
        except httpx.HTTPError as exc:
            log.warning("controller unreachable (%s); retrying next window", exc)
        index, count = index + 1, count + 1


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="moectl sim", description="run a simulated fleet against a controller")
    p.add_argument("--url", default="http://127.0.0.1:8600", help="controller URL")
    p.add_argument("--api-token", default=os.environ.get("MOECTL_API_TOKEN", ""),
                   help="operator token, to register deployments (or MOECTL_API_TOKEN)")
    p.add_argument("--agent-token", default=os.environ.get("MOECTL_AGENT_TOKEN", ""),
                   help="agent token, to post snapshots (or MOECTL_AGENT_TOKEN)")
    p.add_argument("--model", default="sim-moe-64e", choices=sorted(MODELS),
                   help="model shape and pool layout (agents/sim/models.py)")
    p.add_argument("--deployments", type=int, default=2, help="sim-moe-64e: deployments of one decode pool")
    p.add_argument("--ep-size", type=int, default=8, help="sim-moe-64e: ranks per instance")
    p.add_argument("--slots-per-rank", type=int, default=10, help="sim-moe-64e: expert slots per rank")
    p.add_argument("--prefill-instances", type=int, default=1, help="other models: prefill instances")
    p.add_argument("--decode-instances", type=int, default=1, help="other models: decode instances")
    p.add_argument("--protocol", choices=["v1", "v2"], default="v2",
                   help="v2: one group snapshot per instance and window; v1: one snapshot per rank")
    p.add_argument("--gpus-per-node", type=int, default=8,
                   help="sim-moe-64e: ranks per node: tokens cross the network between")
    p.add_argument("--links", choices=sorted(LINKS), default="gpu-nodes",
                   help="sim-moe-64e: what the all-to-all crosses (agents/sim/cost.py): NVLink and a network, or "
                        "loopback gloo")
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
    if not args.api_token or not args.agent_token:
        print("error: the simulated fleet needs --api-token and --agent-token (printed by `moectl serve`)")
        return 2
    fleet = build_fleet(args)
    with httpx.Client(base_url=args.url, timeout=30) as client:
        fleet_client = FleetClient(client, api_token=args.api_token, agent_token=args.agent_token,
                                   protocol=args.protocol)
        run_sim(fleet_client, fleet, window_seconds=args.window_seconds, mode=args.mode, num_windows=args.windows,
                stop=stop)
    return 0
