"""Alertmanager deliveries are handled alert by alert: a bad alert is recorded as rejected with its reason
and never blocks the valid alerts of its group; an alert whose handling failed is handled on the retry
(it is a duplicate only once its handling committed). SQLite and PostgreSQL."""

from __future__ import annotations

import copy

import pytest
from fastapi.testclient import TestClient
from support.alerts import alert, payload
from support.auth import operator
from support.fleet import run_windows, start_fleet

import controlplane.plan.placement as placement


def bad(fingerprint: str, **labels) -> dict:
    body = alert(fingerprint)
    return {**body, "labels": {**body["labels"], **labels}}


BAD = {
    "f" * 80: ("fingerprint", alert("f" * 80)),
    "long-name": ("alertname", bad("long-name", alertname="A" * 300)),
    "nul-name": ("alertname", bad("nul-name", alertname="Moectl\x00Imbalance")),
    "long-deployment": ("deployment", bad("long-deployment", deployment="d" * 64)),
    "nul-deployment": ("deployment", bad("nul-deployment", deployment="sim-0\x00")),
    "nul-starts": ("startsAt", {**alert("nul-starts"), "startsAt": "2027-01-15T08:00:00\x00Z"}),
    "long-starts": ("startsAt", {**alert("long-starts"), "startsAt": "2027-01-15T08:00:00." + "0" * 40 + "Z"}),
}


def test_bad_alerts_are_rejected_one_by_one_and_never_block_their_group(client, sessions, settings, clock):
    fleet = start_fleet(client, {"mode": "auto", "cooldown_seconds": 0})
    run_windows(client, sessions, settings, clock, fleet, 2, reconcile=False)
    group = payload(alert("ok1"), *(body for _, body in BAD.values()), alert("ok2"))
    response = client.post("/v1/alerts/alertmanager", json=group, headers=operator())
    assert response.status_code == 200, response.text
    answer = response.json()
    outcomes = {o["fingerprint"]: o for o in answer["outcomes"]}
    assert len(answer["actions"]) == 1 and outcomes["ok1"]["action_id"] == outcomes["ok2"]["action_id"]
    rejected = [o for o in answer["outcomes"] if o["outcome"].startswith("rejected")]
    assert len(rejected) == len(BAD), answer["outcomes"]
    for (key, (field, _)), outcome in zip(BAD.items(), rejected, strict=True):
        assert field in outcome["outcome"] and outcome["action_id"] is None, (key, outcome)
    [action] = client.get("/v1/deployments/sim-0/actions").json()
    assert sorted(a["fingerprint"] for a in action["alerts"]) == ["ok1", "ok2"]
    listed = client.get("/v1/alerts", params={"limit": 100}).json()
    assert len(listed) == len(BAD) + 2 and sum(e["outcome"].startswith("rejected") for e in listed) == len(BAD)
    assert all("\x00" not in e["alertname"] and len(e["fingerprint"]) <= 64 for e in listed)
    again = client.post("/v1/alerts/alertmanager", json=copy.deepcopy(group), headers=operator()).json()
    assert again["duplicates"] == len(BAD) + 2 and again["actions"] == []


def test_an_alert_whose_handling_failed_is_handled_on_the_retry(client, sessions, settings, clock, monkeypatch):
    fleet = start_fleet(client, {"mode": "auto", "cooldown_seconds": 0})
    run_windows(client, sessions, settings, clock, fleet, 2, reconcile=False)

    def broken(*args, **kwargs):
        raise RuntimeError("the planner broke mid-delivery")

    monkeypatch.setattr(placement, "plan_placement", broken)
    with TestClient(client.app, raise_server_exceptions=False) as fragile:
        failed = fragile.post("/v1/alerts/alertmanager", json=payload(alert("a1"), alert("a2")), headers=operator())
    assert failed.status_code == 500
    monkeypatch.undo()
    retry = client.post("/v1/alerts/alertmanager", json=payload(alert("a1"), alert("a2")), headers=operator())
    assert retry.status_code == 200, retry.text
    assert len(retry.json()["actions"]) == 1, retry.json()
    [action] = client.get("/v1/deployments/sim-0/actions").json()
    assert action["trigger"] == "alert" and sorted(a["fingerprint"] for a in action["alerts"]) == ["a1", "a2"]
    events = client.get("/v1/alerts").json()
    assert [e["action_id"] for e in events] == [action["id"]] * 2, events


@pytest.mark.parametrize("status", ["firing", "resolved"])
def test_an_alert_for_nobody_is_recorded_with_why(client, status):
    body = payload(bad("lost", deployment="not-registered") | {"status": status})
    answer = client.post("/v1/alerts/alertmanager", json=body, headers=operator()).json()
    assert "'not-registered' is not registered" in answer["outcomes"][0]["outcome"]
