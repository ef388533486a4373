"""Every trigger goes through one reconcile path: the loop, an alert and a person asking on one pool
within a cooldown get exactly one action; the two that come after it join it."""

from __future__ import annotations

import pytest
from sqlalchemy import select
from support.alerts import alert, payload
from support.auth import operator
from support.fleet import run_windows, start_fleet

from controlplane.loop.reconcile import Reconciler
from controlplane.store.tables import Request

ORDERS = [("loop", "alert", "manual"), ("alert", "manual", "loop"), ("manual", "loop", "alert")]


def trigger(kind: str, client, sessions, settings, clock) -> int | None:
    """Fires one trigger; returns the action id it answers with (the loop answers with none)."""
    if kind == "loop":
        Reconciler(settings).run_pass(sessions, now=clock.now)
        return None
    if kind == "alert":
        answer = client.post("/v1/alerts/alertmanager", json=payload(alert("fp-imbalance")), headers=operator())
        return answer.json()["outcomes"][0]["action_id"]
    [answer] = client.post("/v1/deployments/sim-0/rebalance", json={}, headers=operator()).json()
    return answer["action"] and answer["action"]["id"]


@pytest.mark.parametrize("mode, status", [("auto", "applied"), ("approve", "awaiting_approval")])
@pytest.mark.parametrize("order", ORDERS, ids="-".join)
def test_three_triggers_in_a_cooldown_make_one_action(client, sessions, settings, clock, order, mode, status):
    fleet = start_fleet(client, {"mode": mode, "cooldown_seconds": 60})
    run_windows(client, sessions, settings, clock, fleet, 2, reconcile=False)
    clock.now += settings.window_seconds / 2 + 0.1  # the last window is complete: the loop may act on it
    answers = {kind: trigger(kind, client, sessions, settings, clock) for kind in order}
    [action] = client.get("/v1/deployments/sim-0/actions").json()
    assert action["trigger"] == order[0] and action["status"] == status
    assert {answers["alert"], answers["manual"]} == {action["id"]}
    assert [a["fingerprint"] for a in action["alerts"]] == ["fp-imbalance"]
    with sessions() as session:
        handled = session.scalars(select(Request).order_by(Request.id)).all()
    assert sorted(r.trigger for r in handled) == ["alert", "manual"]  # the loop's pass is no stored request
    assert all(r.handled_at is not None and r.action_id == action["id"] for r in handled)
    joined = [r.outcome for r in handled if r.trigger != order[0]]
    assert joined and all(o.startswith(f"joined action {action['id']}") for o in joined), joined
