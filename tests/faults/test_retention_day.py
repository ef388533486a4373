"""A simulated day, fast: the fleet simulator drives the controller through 360 four-minute windows on a
clock the test moves, with what makes every kind of row grow (the loop rebalancing a drifting load,
alerts, pods replaced every two hours), the loop and its pruning job after each window. Before the job
only load windows were pruned; now every kind levels off at what its retention holds, and so does the
SQLite file. SQLite and PostgreSQL (row counts); SQLite also file size."""

from __future__ import annotations

import math
import os

import pytest
from sqlalchemy import func, select
from sqlalchemy.engine import make_url
from support.alerts import alert, payload
from support.auth import AGENT_TOKEN, API_TOKEN, operator
from support.fleet import run_windows

from agents.sim.fleet import make_fleet
from agents.sim.fleet_client import FleetClient
from agents.sim.load import LoadModel
from controlplane.loop.prune import Pruning
from controlplane.store.observed_tables import Agent, LoadWindow
from controlplane.store.tables import Action, AlertEvent, KnobVersion, Placement, Request

HOUR, RETAIN = 3600.0, 2 * 3600.0
WINDOW = 240.0  # four-minute windows: the day in half the posts (its rows made still dwarf those kept)
NUM_WINDOWS = int(24 * HOUR / WINDOW)
PER_HOUR = int(HOUR / WINDOW)
TABLES = {"actions": Action, "placements": Placement, "knob_versions": KnobVersion, "requests": Request,
          "alert_events": AlertEvent, "agents": Agent, "load_windows": LoadWindow}


@pytest.fixture
def settings(settings):
    return settings.model_copy(update={
        "window_seconds": WINDOW, "history_windows": 30, "prune_seconds": 600.0, "agent_gone_seconds": 300.0,
        **{f"retain_{kind}_seconds": RETAIN for kind in ("actions", "versions", "requests", "alert_events", "agents")}})


def sizes(sessions, url: str) -> dict[str, int]:
    """Rows per table, the highest id ever given (rows made), and the SQLite file's bytes (with its WAL)."""
    with sessions() as session:
        out = {name: session.scalar(select(func.count()).select_from(table)) for name, table in TABLES.items()}
        out |= {f"{name}_made": session.scalar(select(func.max(table.id))) or 0 for name, table in TABLES.items()}
    path = make_url(url).database
    if make_url(url).get_backend_name() == "sqlite":
        out["bytes"] = sum(os.path.getsize(path + s) for s in ("", "-wal") if os.path.exists(path + s))
    return out


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_a_day_of_the_simulated_fleet_keeps_the_database_bounded(client, sessions, settings, clock):
    fleet = make_fleet(num_deployments=1, ep_size=4, slots_per_rank=20, seed=3)
    fleet_client = FleetClient(client, api_token=API_TOKEN, agent_token=AGENT_TOKEN)
    # what `moectl up --sim` registers, and routing managed too
    fleet_client.register(fleet, policy={"mode": "auto", "cooldown_seconds": 3 * WINDOW})
    pruning = Pruning(settings)
    samples: list[dict[str, int]] = []
    for index in range(NUM_WINDOWS):
        if index % (2 * PER_HOUR) == 0:  # pods replaced: the group under new names, the old ranks go silent
            fleet[0].instance = f"sim-0-decode-{index // (2 * PER_HOUR)}"
        if index % PER_HOUR == PER_HOUR // 2:  # the hot experts move every hour
            fleet[0].load = LoadModel(8, 64, 6, seed=100 + index)
        if index % (PER_HOUR // 6) == 1:  # an alert every ten minutes
            client.post("/v1/alerts/alertmanager", json=payload(alert(f"f{index}")), headers=operator())
        run_windows(client, sessions, settings, clock, fleet, 1, fleet_client=fleet_client)
        pruning.run_if_due(sessions, now=clock.now)
        if (index + 1) % (2 * PER_HOUR) == 0:
            samples.append(sizes(sessions, settings.database_url))

    print("\nhour " + " ".join(f"{k:>14}" for k in samples[0]))
    for hour, sample in enumerate(samples, 1):
        print(f"{2 * hour:>4} " + " ".join(f"{v:>14}" for v in sample.values()))
    last, at_8h = samples[-1], samples[3]
    # windows past the history are pruned by the pruning job, at most every prune_seconds (controlplane/loop/prune.py)
    assert last["load_windows"] <= settings.history_windows + 2 + math.ceil(settings.prune_seconds / WINDOW)
    for name in ("actions", "placements", "requests", "alert_events", "agents"):
        # made all day long, kept only for their retention (two hours, and what is in force)
        assert last[f"{name}_made"] >= 4 * last[name] > 0, (name, last)
        # and level: no more at the end of the day than after the first few retention periods
        assert last[name] <= 1.25 * at_8h[name] + 4, (name, at_8h, last)
    if "bytes" in last:
        assert last["bytes"] <= 1.25 * at_8h["bytes"], [s["bytes"] for s in samples]
