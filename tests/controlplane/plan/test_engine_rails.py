"""The loop applies the engine's rails (controlplane/plan/engines.py through controlplane/loop/reconcile.py): a
deployment that runs SGLang, where a placement change restarts the groups, gets no second change within 600 s of
its first, where the same policy on the bundled runtime may change again at once."""

from __future__ import annotations

import pytest
from sqlalchemy import select
from support.auth import operator
from support.fleet import run_windows, start_fleet

from controlplane.store.tables import Deployment

# margin 0: any change that gains pays (an SGLang restart's price would hold the first one): the rails alone here
POLICY = {"mode": "auto", "cooldown_seconds": 0, "imbalance_threshold": 1.01, "sustained_windows": 1,
          "change_price_margin": 0}


@pytest.mark.parametrize("engine", ["bundled", "sglang"])
def test_a_restart_engine_waits_out_its_restart_spacing(client, sessions, settings, clock, engine):
    fleet = start_fleet(client, POLICY)
    with sessions() as session, session.begin():
        session.scalars(select(Deployment)).one().engine = engine
    run_windows(client, sessions, settings, clock, fleet, 3)
    name = fleet[0].deployment
    applied = [a for a in client.get(f"/v1/deployments/{name}/actions", headers=operator()).json()
               if a["kind"] == "placement"]
    assert applied, "no first change"
    run_windows(client, sessions, settings, clock, fleet, 1, reconcile=False)  # fresh, within 600 s of the change
    plan = client.post(f"/v1/deployments/{name}/rebalance", json={"dry_run": True}, headers=operator()).json()
    text = str(plan)
    if engine == "sglang":
        assert "cooldown 600s" in text, text[:500]
    else:
        assert "cooldown 600s" not in text
