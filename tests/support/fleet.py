"""Drives a simulated fleet through the API window by window, with the loop in between."""

from __future__ import annotations

from agents.protocol import ModelShape
from agents.sim.cost import CPU_GLOO, GPU_NODES
from agents.sim.fleet import make_fleet
from agents.sim.fleet_client import FleetClient
from controlplane.loop.reconcile import Reconciler
from support.auth import AGENT_TOKEN, API_TOKEN

# DeepSeek-V3's routing shape scaled down: 8 groups of 8 experts, top-8 within the model's own 4 groups, one
# group per node (16 GPUs, 2 per node), where a tighter limit cuts the network copies
NODES = dict(model=ModelShape(name="sim-nodes", num_layers=8, num_experts=64, num_groups=8, top_k=8, topk_group=4),
             ep_size=16, slots_per_rank=4, gpus_per_node=2, links=GPU_NODES, group_affinity=1.0)
# the bundled runtime's shape (4 groups of 8, top-4, trained with topk_group 2) on 4 CPU ranks over gloo
CPU = dict(model=ModelShape(name="sim-tiny", num_layers=3, num_experts=32, num_groups=4, top_k=4, topk_group=2),
           ep_size=4, slots_per_rank=8, links=CPU_GLOO)


def start_fleet(client, policy: dict, *, seed: int = 3, **shape):
    """One simulated deployment registered with `policy`; shape: make_fleet's arguments (default 8 ranks of
    10 slots of its default model on one node)."""
    fleet = make_fleet(num_deployments=1, seed=seed, **({"ep_size": 8, "slots_per_rank": 10} | shape))
    FleetClient(client, api_token=API_TOKEN, agent_token=AGENT_TOKEN).register(fleet, policy=policy)
    return fleet


def run_windows(client, sessions, settings, clock, fleet, num_windows: int, *, reconcile: bool = True,
                fleet_client: FleetClient | None = None) -> list[dict]:
    """Posts num_windows windows; after each, the clock passes the window's end (it is complete) and,
    if asked, the loop runs once. Returns the overview after each window. fleet_client: one that
    registered the fleet, so it registers it again where the controller forgot it."""
    fleet_client = fleet_client or FleetClient(client, api_token=API_TOKEN, agent_token=AGENT_TOKEN)
    overviews = []
    for _ in range(num_windows):
        start = clock.now
        clock.now += settings.window_seconds
        fleet_client.post_window(fleet, start, settings.window_seconds)
        clock.now += settings.window_seconds / 2 + 0.1
        if reconcile:
            Reconciler(settings).run_pass(sessions, now=clock.now)
        clock.now = start + settings.window_seconds
        overviews.append(client.get(f"/v1/deployments/{fleet[0].deployment}/overview").json())
    return overviews
