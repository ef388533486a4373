"""The walking skeleton end to end: skewed simulated load -> snapshots over HTTP -> store -> plan ->
placement back in the response -> applied -> measured imbalance falls."""

from __future__ import annotations

from support.fleet import run_windows, start_fleet


def test_auto_mode_brings_imbalance_under_1_3(client, sessions, settings, clock):
    fleet = start_fleet(client, {"mode": "auto", "cooldown_seconds": 0})
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


def test_observe_mode_records_plans_and_changes_nothing(client, sessions, settings, clock):
    fleet = start_fleet(client, {"mode": "observe", "cooldown_seconds": 0})
    overviews = run_windows(client, sessions, settings, clock, fleet, num_windows=6)
    last = overviews[-1]
    assert fleet[0].placement_version == 0
    assert last["pools"][0]["placement_version"] == 0
    assert last["imbalance"] >= 1.8
    planned = [a for a in last["last_actions"] if a["status"] == "planned"]
    assert planned and planned[0]["predicted"]["imbalance_after"] < planned[0]["predicted"]["imbalance_before"]
