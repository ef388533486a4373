"""Alertmanager webhook: at-least-once delivery, storms, modes, and what is recorded."""

from __future__ import annotations

import copy

from support.alerts import alert, payload
from support.auth import operator
from support.fleet import run_windows, start_fleet


def post(client, body):
    response = client.post("/v1/alerts/alertmanager", json=body, headers=operator())
    assert response.status_code == 200, response.text
    return response.json()


def test_a_storm_redelivered_is_one_action(client, sessions, settings, clock):
    fleet = start_fleet(client, {"mode": "auto", "cooldown_seconds": 0})
    run_windows(client, sessions, settings, clock, fleet, 2, reconcile=False)
    body = payload(*(alert(f"fp{i}") for i in range(5)))
    first = post(client, body)
    assert len(first["actions"]) == 1 and first["duplicates"] == 0
    assert "joined action" in first["outcomes"][-1]["outcome"]
    again = post(client, copy.deepcopy(body))  # at-least-once: the same notification again
    assert again["duplicates"] == 5 and again["actions"] == []
    [action] = client.get("/v1/deployments/sim-0/actions").json()
    assert action["trigger"] == "alert" and action["status"] == "applied"
    assert sorted(a["fingerprint"] for a in action["alerts"]) == [f"fp{i}" for i in range(5)]
    resolved = post(client, payload(alert("fp0", status="resolved"), status="resolved"))
    assert resolved["outcomes"][0]["outcome"] == "resolved" and resolved["actions"] == []


def test_modes_and_mapping(client, sessions, settings, clock):
    fleet = start_fleet(client, {"mode": "observe", "cooldown_seconds": 0})
    run_windows(client, sessions, settings, clock, fleet, 2, reconcile=False)
    result = post(client, payload(alert("a"), alert("b", deployment="elsewhere"), alert("c", action="page"),
                                  {**alert("d"), "labels": {"alertname": "NoDeployment"}}))
    outcomes = {o["fingerprint"]: o["outcome"] for o in result["outcomes"]}
    assert "planned" in outcomes["a"]
    assert "'elsewhere' is not registered" in outcomes["b"]
    assert "no action" in outcomes["c"]
    assert "not mapped to a deployment" in outcomes["d"]
    assert fleet[0].placement_version == 0
    client.put("/v1/deployments/sim-0/policy", json={"mode": "off"}, headers=operator())
    assert post(client, payload(alert("e")))["outcomes"][0]["outcome"] == "policy mode is off"


def test_bad_payloads_are_refused(client):
    wrong_version = client.post("/v1/alerts/alertmanager", json={"version": "3", "alerts": []}, headers=operator())
    assert wrong_version.status_code == 422 and "version '4'" in wrong_version.json()["detail"]
    no_alerts = client.post("/v1/alerts/alertmanager", json={"version": "4"}, headers=operator())
    assert no_alerts.status_code == 422 and "alerts" in no_alerts.json()["detail"]
    assert client.post("/v1/alerts/alertmanager", json=payload()).status_code == 401
    wrong = client.post("/v1/alerts/alertmanager", json=payload(alert("x")), headers={"Authorization": "Bearer no"})
    assert wrong.status_code == 401
    bad_status = payload({**alert("y"), "status": "exploded"})
    assert client.post("/v1/alerts/alertmanager", json=bad_status, headers=operator()).status_code == 422
    assert client.get("/v1/alerts").json() == []  # nothing stored from any of them
