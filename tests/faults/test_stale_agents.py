"""Pods replaced twice (instances renamed): the old ranks stop reporting. They used to count against the
quorum forever ("only 2/6 agents are fresh"); now they leave it once silent past `agent_gone_seconds`, the
overview counts them as gone, and an admin can remove them (or the whole deployment) at once, each removal
audited. SQLite and PostgreSQL."""

from __future__ import annotations

from support.auth import AGENT_TOKEN, API_TOKEN, agent, operator
from support.fleet import run_windows

from agents.sim.fleet import make_fleet
from agents.sim.fleet_client import FleetClient
from controlplane.loop.reconcile import Reconciler

POLICY = {"mode": "auto", "cooldown_seconds": 0, "imbalance_threshold": 1.01}
AGENTS = "/v1/deployments/sim-0/pools/decode/agents"


def reasons(sessions, settings, clock) -> list[str]:
    return [p.reason for p in Reconciler(settings).run_pass(sessions, now=clock.now, dry_run=True).plans]


def test_replaced_pods_leave_the_quorum_and_can_be_removed(client, sessions, settings, clock):
    fleet = make_fleet(num_deployments=1, ep_size=2, slots_per_rank=40, seed=5)
    FleetClient(client, api_token=API_TOKEN, agent_token=AGENT_TOKEN).register(fleet, policy=POLICY)
    for name in ("pod-a", "pod-b", "pod-c"):  # the same EP group, its pods replaced twice
        fleet[0].instance = name
        run_windows(client, sessions, settings, clock, fleet, 4, reconcile=False)
    assert reasons(sessions, settings, clock) == ["only 2/6 agents are fresh"]
    overview = client.get("/v1/deployments/sim-0/overview").json()
    assert overview["agents"] == {"total": 6, "fresh": 2, "stale": 4, "gone": 0, "unhealthy": []}

    silent = {a["instance"]: a["state"] for a in client.get(AGENTS).json()}
    assert silent == {"pod-a": "stale", "pod-b": "stale", "pod-c": "fresh"}
    refused = client.delete(f"{AGENTS}/pod-c/1", headers=operator())
    assert refused.status_code == 409 and "pod-c/1" in refused.json()["detail"] and "Stop them first" in \
        refused.json()["detail"]
    assert client.delete(f"{AGENTS}/pod-a/1", headers=agent()).status_code == 403
    assert client.delete(f"{AGENTS}/pod-x", headers=operator()).status_code == 404
    removed = client.delete(f"{AGENTS}/pod-a/1", headers=operator())
    assert removed.status_code == 200 and [(a["instance"], a["rank"]) for a in removed.json()] == [("pod-a", 1)]
    assert client.delete(f"{AGENTS}/pod-a/1", headers=operator()).status_code == 404

    # silent past agent_gone_seconds: out of the quorum by themselves, counted as gone
    num_windows = int(settings.agent_gone_seconds // settings.window_seconds) - 2
    run_windows(client, sessions, settings, clock, fleet, num_windows, reconcile=False)
    assert not any("agents are fresh" in r for r in reasons(sessions, settings, clock))
    overview = client.get("/v1/deployments/sim-0/overview").json()
    assert overview["agents"] == {"total": 2, "fresh": 2, "stale": 0, "gone": 3, "unhealthy": []}
    assert overview["pools"][0]["applied_placement_version"] is not None  # the fresh agents agree

    swept = client.delete(AGENTS, headers=operator())  # every silent agent of the pool; fresh ones stay
    assert sorted((a["instance"], a["rank"], a["state"]) for a in swept.json()) == [
        ("pod-a", 0, "gone"), ("pod-b", 0, "gone"), ("pod-b", 1, "gone")]
    assert client.delete(AGENTS, headers=operator()).json() == []
    assert client.get("/v1/deployments/sim-0/overview").json()["agents"]["gone"] == 0

    kept = client.delete("/v1/deployments/sim-0", headers=operator())
    assert kept.status_code == 409 and "pod-c" in kept.json()["detail"]
    clock.now += settings.stale_after_seconds + 1  # the fleet stopped
    deleted = client.delete("/v1/deployments/sim-0", headers=operator())
    assert deleted.status_code == 200, deleted.text
    assert deleted.json()["removed"]["agents"] == 2 and deleted.json()["removed"]["pools"] == 1
    assert client.get("/v1/deployments/sim-0/overview").status_code == 404
    assert client.delete("/v1/deployments/sim-0", headers=operator()).status_code == 404

    audit = client.get("/v1/audit").json()
    assert [e["verb"] for e in audit] == ["delete_deployment", "delete_agents", "delete_agents"]
    assert {e["created_by"] for e in audit} == {"bootstrap-admin"}
    assert [(a["instance"], a["rank"]) for a in audit[2]["detail"]["agents"]] == [("pod-a", 1)]
    assert audit[0]["detail"]["removed"]["pools"] == 1
