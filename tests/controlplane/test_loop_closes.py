"""The walking skeleton end to end: skewed simulated load -> snapshots over HTTP -> store -> plan ->
placement back in the response -> applied -> measured imbalance falls."""

from __future__ import annotations

import pytest
from conftest import AGENT_TOKEN, API_TOKEN

from controlplane.reconcile import reconcile_once
from controlplane.sim.fleet import FleetClient, make_fleet


def run_windows(client, sessions, settings, clock, fleet, num_windows: int) -> list[dict]:
    fleet_client = FleetClient(client, api_token=API_TOKEN, agent_token=AGENT_TOKEN)
    overviews = []
    for _ in range(num_windows):
        start = clock.now
        clock.now += settings.window_seconds
        fleet_client.post_window(fleet, start, settings.window_seconds)
        clock.now += settings.window_seconds / 2 + 0.1  # the window is now complete
        reconcile_once(sessions, settings, now=clock.now)
        clock.now = start + settings.window_seconds
        overviews.append(client.get(f"/v1/deployments/{fleet[0].deployment}/overview").json())
    return overviews


@pytest.fixture
def fleet():
    return make_fleet(num_deployments=1, ep_size=8, slots_per_rank=10, seed=3)


def test_auto_mode_brings_imbalance_under_1_3(client, sessions, settings, clock, fleet):
    FleetClient(client, api_token=API_TOKEN, agent_token=AGENT_TOKEN).register(
        fleet, policy={"mode": "auto", "cooldown_seconds": 0})
    overviews = run_windows(client, sessions, settings, clock, fleet, num_windows=12)
    imbalances = [o["imbalance"] for o in overviews if o["imbalance"] is not None]
    assert imbalances[0] >= 1.8, imbalances
    assert imbalances[-1] < 1.3, imbalances
    last = overviews[-1]
    assert last["placement_version"]["decode"] >= 1
    assert fleet[0].placement_version == last["pools"][0]["placement_version"]
    applied = [a for a in last["last_actions"] if a["kind"] == "placement"]
    assert applied and applied[-1]["trigger"] == "loop"
    assert {a["status"] for a in applied} <= {"applied", "verified"}
    assert any(a["status"] == "verified" and a["measured"]["imbalance_after"] < 1.3 for a in applied)


def test_observe_mode_records_plans_and_changes_nothing(client, sessions, settings, clock, fleet):
    FleetClient(client, api_token=API_TOKEN, agent_token=AGENT_TOKEN).register(
        fleet, policy={"mode": "observe", "cooldown_seconds": 0})
    overviews = run_windows(client, sessions, settings, clock, fleet, num_windows=6)
    last = overviews[-1]
    assert fleet[0].placement_version == 0
    assert last["pools"][0]["placement_version"] == 0
    assert last["imbalance"] >= 1.8
    planned = [a for a in last["last_actions"] if a["status"] == "planned"]
    assert planned and planned[0]["predicted"]["imbalance_after"] < planned[0]["predicted"]["imbalance_before"]
