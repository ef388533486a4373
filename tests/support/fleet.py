"""Drives a simulated fleet through the API window by window, with the loop in between."""

from __future__ import annotations

from agents.sim.fleet import DEFAULT_MODEL, FleetClient, make_fleet
from controlplane.reconcile import reconcile_once
from support.auth import AGENT_TOKEN, API_TOKEN


def start_fleet(client, policy: dict, *, seed: int = 3, model=DEFAULT_MODEL):
    fleet = make_fleet(num_deployments=1, ep_size=8, slots_per_rank=10, model=model, seed=seed)
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
            reconcile_once(sessions, settings, now=clock.now)
        clock.now = start + settings.window_seconds
        overviews.append(client.get(f"/v1/deployments/{fleet[0].deployment}/overview").json())
    return overviews
