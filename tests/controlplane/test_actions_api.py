"""Manual rebalance, approval, and rejection."""

from __future__ import annotations

from support.auth import operator
from support.fleet import run_windows, start_fleet


def test_dry_run_returns_the_plan_and_records_nothing(client, sessions, settings, clock):
    fleet = start_fleet(client, {"mode": "auto"})
    run_windows(client, sessions, settings, clock, fleet, 2, reconcile=False)
    [plan] = client.post("/v1/deployments/sim-0/rebalance", json={"dry_run": True}, headers=operator()).json()
    assert plan["decision"] == "rebalance" and plan["action"] is None
    assert plan["predicted"]["imbalance_after"] < plan["predicted"]["imbalance_before"]
    assert client.get("/v1/deployments/sim-0/actions").json() == []


def test_approve_mode_waits_for_a_person(client, sessions, settings, clock):
    fleet = start_fleet(client, {"mode": "approve", "cooldown_seconds": 0})
    overviews = run_windows(client, sessions, settings, clock, fleet, 6)
    waiting = [a for a in overviews[-1]["last_actions"] if a["status"] == "awaiting_approval"]
    assert len(waiting) == 1 and fleet[0].placement_version == 0  # one proposal stands until decided
    before = overviews[-1]["imbalance"]
    approved = client.post(f"/v1/actions/{waiting[0]['id']}/approve", headers=operator())
    assert approved.status_code == 200 and approved.json()["status"] == "applied"
    assert approved.json()["measured"]["approved_by"] == "bootstrap-admin"
    again = client.post(f"/v1/actions/{waiting[0]['id']}/approve", headers=operator())
    assert again.status_code == 409 and "not awaiting approval" in again.json()["detail"]
    after = run_windows(client, sessions, settings, clock, fleet, 3)
    assert fleet[0].placement_version == 1 and after[-1]["imbalance"] < before


def test_reject_and_superseded(client, sessions, settings, clock):
    fleet = start_fleet(client, {"mode": "approve", "cooldown_seconds": 0})
    run_windows(client, sessions, settings, clock, fleet, 3)
    [first] = client.get("/v1/deployments/sim-0/actions").json()
    rejected = client.post(f"/v1/actions/{first['id']}/reject", headers=operator()).json()
    assert rejected["status"] == "rejected"
    assert client.post(f"/v1/actions/{first['id']}/approve", headers=operator()).status_code == 409
    # two proposals; approving one makes the other stale
    [a] = client.post("/v1/deployments/sim-0/rebalance", json={}, headers=operator()).json()
    [b] = client.post("/v1/deployments/sim-0/rebalance", json={}, headers=operator()).json()
    assert client.post(f"/v1/actions/{a['action']['id']}/approve", headers=operator()).json()["status"] == "applied"
    stale = client.post(f"/v1/actions/{b['action']['id']}/approve", headers=operator()).json()
    assert stale["status"] == "superseded" and "v1 is applied" in stale["measured"]["reason"]


def test_rebalance_with_mode_off_is_refused(client, sessions, settings, clock):
    fleet = start_fleet(client, {"mode": "off"})
    run_windows(client, sessions, settings, clock, fleet, 2)
    response = client.post("/v1/deployments/sim-0/rebalance", json={}, headers=operator())
    assert response.status_code == 409 and "mode 'off'" in response.json()["detail"]
