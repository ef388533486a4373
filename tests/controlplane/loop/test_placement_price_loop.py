"""Pricing in the loop, through the real controller on a simulated fleet: a placement change whose gain over its
horizon is under what a change costs is not made (an SGLang restart's prior: minutes), and the same change is made
once the pool's measured cost is lower; every change records its price and, verified, what it realised."""

from __future__ import annotations

from support.auth import API_TOKEN
from support.fleet import run_windows, start_fleet

from controlplane.loop.reconcile import Reconciler
from controlplane.observed.measured_cost import MeasuredCost
from controlplane.store import change_costs, deployments
from controlplane.store.tables import Deployment

POLICY = {"mode": "auto", "cooldown_seconds": 0}


def placements(overview: dict) -> list[dict]:
    return [a for a in overview["last_actions"] if a["kind"] == "placement"]


def test_a_change_that_pays_is_made_with_its_price_and_verified_with_what_it_realised(client, sessions, settings,
                                                                                       clock):
    fleet = start_fleet(client, POLICY)  # bundled: a switch is priced at its prior until measured
    overviews = run_windows(client, sessions, settings, clock, fleet, 12)
    made = placements(overviews[-1])
    assert made and fleet[0].placement_version >= 1
    first = made[-1]  # newest first: the oldest is the first change
    price = first["predicted"]["price"]
    assert price["is_paying"] and price["gain_seconds"] >= price["margin"] * price["cost_seconds"] > 0
    assert price["cost_source"].startswith("prior: ")
    verified = [a for a in made if a["status"] == "verified"]
    assert verified, [a["status"] for a in made]
    realised = verified[-1]["measured"]["realised"]
    assert realised["gain_share"] > 0 and realised["gain_seconds"] > 0
    # the overview: the pool's last priced changes, predicted beside realised
    shown = {c["action_id"]: c for c in overviews[-1]["pools"][0]["priced_changes"]}
    assert shown[verified[-1]["id"]]["realised"] == realised
    assert shown[verified[-1]["id"]]["predicted"]["gain_seconds"] == verified[-1]["predicted"]["price"]["gain_seconds"]


def test_a_change_that_does_not_pay_is_not_made_and_is_made_when_the_cost_is_lower(client, sessions, settings,
                                                                                   clock):
    fleet = start_fleet(client, POLICY)
    client.put(f"/v1/deployments/{fleet[0].deployment}/engine", json={"engine": "sglang"},
               headers={"Authorization": f"Bearer {API_TOKEN}"}).raise_for_status()
    held = run_windows(client, sessions, settings, clock, fleet, 5)
    assert not placements(held[-1]) and fleet[0].placement_version == 0
    [plan] = Reconciler(settings).run_pass(sessions, now=clock.now + settings.window_seconds / 2, dry_run=True).plans
    assert plan.decision.value == "hold" and plan.reason.startswith("the change does not pay: "), plan.reason
    assert plan.inputs["price"]["cost_seconds"] == 180.0 and not plan.inputs["price"]["is_paying"]
    pool = held[-1]["pools"][0]
    assert pool["change_cost"]["seconds"] == 180.0 and pool["change_cost"]["source"].startswith("prior: ")
    with sessions() as session, session.begin():  # the deployment measured its restarts: a second each
        deployment = session.query(Deployment).filter_by(name=fleet[0].deployment).one()
        [decode] = deployments.pools_of(session, deployment)
        change_costs.write(session, decode, MeasuredCost(4, 1.0, 1.0, 0), now=clock.now)
    made = run_windows(client, sessions, settings, clock, fleet, 2)
    [change] = placements(made[-1])
    assert change["predicted"]["price"]["cost_source"].startswith("measured: ")
    assert change["predicted"]["price"]["cost_seconds"] == 1.0 and fleet[0].placement_version >= 1
