"""Manual rebalance, approval, and rejection."""

from __future__ import annotations

from support.auth import operator
from support.fleet import run_windows, start_fleet
from support.placements import fleet_on_a_bad_placement


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


def test_reject_and_one_proposal_at_a_time(client, sessions, settings, clock):
    fleet = start_fleet(client, {"mode": "approve", "cooldown_seconds": 0})
    run_windows(client, sessions, settings, clock, fleet, 3)
    [first] = client.get("/v1/deployments/sim-0/actions").json()
    rejected = client.post(f"/v1/actions/{first['id']}/reject", headers=operator()).json()
    assert rejected["status"] == "rejected" and rejected["measured"]["rejected_by"] == "bootstrap-admin"
    assert client.post(f"/v1/actions/{first['id']}/approve", headers=operator()).status_code == 409
    # a person asking twice gets the proposal in flight back, not a second one
    [a] = client.post("/v1/deployments/sim-0/rebalance", json={}, headers=operator()).json()
    [b] = client.post("/v1/deployments/sim-0/rebalance", json={}, headers=operator()).json()
    assert a["action"]["status"] == "awaiting_approval" and b["action"]["id"] == a["action"]["id"]
    assert f"joined action {a['action']['id']}" in b["reason"] and b["predicted"] == a["predicted"]
    assert client.post(f"/v1/actions/{a['action']['id']}/approve", headers=operator()).json()["status"] == "applied"
    assert len(client.get("/v1/deployments/sim-0/actions").json()) == 2


def test_a_proposal_made_stale_by_a_rollback_is_superseded(client, sessions, settings, clock):
    fleet, bad = fleet_on_a_bad_placement(client, sessions, settings, clock, {
        "mode": "approve", "cooldown_seconds": 0, "imbalance_threshold": 100})
    run_windows(client, sessions, settings, clock, fleet, 2)  # the agents take v1; one window runs under it
    clock.now += settings.window_seconds / 2 + 0.1  # ...and is complete: a forced plan needs one
    [proposal] = client.post("/v1/deployments/sim-0/rebalance", json={}, headers=operator()).json()
    clock.now -= settings.window_seconds / 2 + 0.1
    assert proposal["action"] is not None and proposal["action"]["status"] == "awaiting_approval", proposal
    run_windows(client, sessions, settings, clock, fleet, 2)  # v1 measured worse: rolled back as v2
    rolled = next(a for a in client.get("/v1/deployments/sim-0/actions").json() if a["id"] == bad.action_id)
    assert rolled["status"] == "rolled_back" and rolled["measured"]["restored_version"] == 2
    stale = client.post(f"/v1/actions/{proposal['action']['id']}/approve", headers=operator()).json()
    assert stale["status"] == "superseded" and "v1, v2 is applied" in stale["measured"]["reason"]
    assert fleet[0].placement_version == 2


def test_rebalance_with_mode_off_is_refused(client, sessions, settings, clock):
    fleet = start_fleet(client, {"mode": "off"})
    run_windows(client, sessions, settings, clock, fleet, 2)
    response = client.post("/v1/deployments/sim-0/rebalance", json={}, headers=operator())
    assert response.status_code == 409 and "mode 'off'" in response.json()["detail"]
