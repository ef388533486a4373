"""The controller's database swapped under a running fleet (an empty one, or an older backup): ranks running
placement v8 were refused `409 placement_version 8 was never issued` forever, their windows dropped, the
overview at 0 agents. Now the fleet registers again where it must, sends the table it runs, the controller
adopts it as that version (an `adopted` action) and the loop goes on from there; ranks left on different
versions converge on the highest. The simulated fleet (agents/sim/fleet_client.py) posting per rank (moectl.v1)
and per EP group (moectl.v2: rank 0 sends the table of the newest version its ranks ran), and real agents over
simulated engines against a real controller restarted on another database, on SQLite and PostgreSQL."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import numpy as np
import pytest
from fastapi.testclient import TestClient
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families
from support.auth import AGENT_TOKEN, API_TOKEN, operator
from support.databases import sibling
from support.fleet import run_windows
from support.processes import RANK_PROCESSES
from support.ranks import make_group, run_group
from support.servers import free_port, until

from agents.sim.fleet import SimInstance, make_fleet
from agents.sim.fleet_client import FleetClient
from agents.sim.load import LoadModel
from agents.telemetry.poster import ControllerLink
from controlplane.api.app import create_app
from controlplane.cmd.serve import Controller
from controlplane.loop.reconcile import Reconciler
from controlplane.loop.telemetry import ControllerMetrics
from controlplane.store.db import make_engine, make_sessions, upgrade
from controlplane.store.knobs import PLACEMENT
from controlplane.store.observed_tables import LoadWindow
from controlplane.store.tables import Pool

pytestmark = RANK_PROCESSES

REPO = Path(__file__).resolve().parents[2]
POLICY = {"mode": "auto", "cooldown_seconds": 0, "change_price_margin": 0}  # every change made: not priced here
EP_SIZE = 8
# the fleet's posts per instance and window: one per rank (moectl.v1), or one for the EP group (moectl.v2)
POSTS = {"v1": EP_SIZE, "v2": 1}
protocols = pytest.mark.parametrize("protocol", list(POSTS))


@contextmanager
def controller_on(url: str, settings, clock) -> Iterator[tuple[TestClient, object, object, ControllerMetrics]]:
    """A controller restarted on the database at `url`: (client, sessions, settings, metrics)."""
    settings = settings.model_copy(update={"database_url": url})
    upgrade(url)
    engine = make_engine(url, timeout_seconds=settings.db_timeout_seconds)
    sessions, metrics = make_sessions(engine), ControllerMetrics(CollectorRegistry())
    try:
        with TestClient(create_app(settings, sessions, clock=clock, metrics=metrics)) as client:
            yield client, sessions, settings, metrics
    finally:
        engine.dispose()


def reskew(instance: SimInstance, seed: int) -> None:
    """Other hot experts: the applied placement is badly off again, so the loop has to act."""
    model = instance.model
    instance.load = LoadModel(model.num_layers, model.num_experts, model.top_k, seed=seed)


def snapshot_answers(metrics: ControllerMetrics) -> dict[str, int]:
    return {s.labels["status"]: int(s.value) for s in metrics.snapshots.collect()[0].samples
            if s.name.endswith("_total")}


def versions(sessions) -> list[int]:
    with sessions() as session:
        pool = session.query(Pool).one()
        return [p.version for p in PLACEMENT.versions.recent(session, pool, since=0.0)]


def start(client, sessions, settings, clock, fleet, num_windows: int, protocol: str) -> FleetClient:
    fleet_client = FleetClient(client, api_token=API_TOKEN, agent_token=AGENT_TOKEN, protocol=protocol)
    fleet_client.register(fleet, policy=POLICY)
    run_windows(client, sessions, settings, clock, fleet, num_windows, fleet_client=fleet_client)
    return fleet_client


@protocols
def test_an_empty_database_adopts_what_the_fleet_runs_and_the_loop_goes_on(client, sessions, settings, clock,
                                                                           protocol):
    fleet = make_fleet(num_deployments=1, ep_size=EP_SIZE, slots_per_rank=10, seed=3)
    fleet_client = start(client, sessions, settings, clock, fleet, 4, protocol)
    posts = POSTS[protocol]
    running, table = fleet[0].placement_version, fleet[0].slot_to_expert.copy()
    assert running >= 1

    with controller_on(sibling(settings.database_url), settings, clock) as (new, new_sessions, new_settings, metrics):
        fleet_client.client = new  # the same agents, a controller restarted at the same address
        first = run_windows(new, new_sessions, new_settings, clock, fleet, 1, fleet_client=fleet_client)[0]
        assert first["placement_version"] == {"decode": running} and fleet[0].placement_version == running
        assert first["agents"] == {"total": EP_SIZE, "fresh": EP_SIZE, "stale": 0, "gone": 0, "unhealthy": []}
        [adopted] = first["last_actions"]
        assert (adopted["status"], adopted["trigger"], adopted["placement_version"]) == ("adopted", "fleet", running)
        assert adopted["reason"].startswith("adopted from the fleet")
        with new_sessions() as session:
            stored = PLACEMENT.versions.latest(session, session.query(Pool).one())
            np.testing.assert_array_equal(stored.value.slot_to_expert, table)
            # the window of the refusal is not lost: all 8 ranks' reports are in it
            assert [w.num_reports for w in session.query(LoadWindow)] == [EP_SIZE]
        # one 404 (registered again) and one 409 (the table sent), then only 200s
        assert snapshot_answers(metrics) == {"404": 1, "409": 1, "200": posts}

        reskew(fleet[0], seed=11)
        overviews = run_windows(new, new_sessions, new_settings, clock, fleet, 4, fleet_client=fleet_client)
        assert overviews[-1]["placement_version"] == {"decode": fleet[0].placement_version}
        assert fleet[0].placement_version > running, "the loop planned nothing past the adopted version"
        assert snapshot_answers(metrics) == {"404": 1, "409": 1, "200": posts * 5}


@protocols
def test_an_older_backup_adopts_the_newer_version_the_fleet_runs(client, sessions, settings, clock, protocol):
    fleet = make_fleet(num_deployments=1, ep_size=EP_SIZE, slots_per_rank=10, seed=3)
    fleet_client = start(client, sessions, settings, clock, fleet, 4, protocol)
    backed_up = versions(sessions)[-1]  # the latest issued (the fleet may not run it yet)
    sessions.kw["bind"].dispose()  # PostgreSQL copies a database nobody is connected to
    backup = sibling(settings.database_url, copy=True)
    reskew(fleet[0], seed=11)
    run_windows(client, sessions, settings, clock, fleet, 4, fleet_client=fleet_client)
    running = fleet[0].placement_version
    assert running > backed_up

    with controller_on(backup, settings, clock) as (old, old_sessions, old_settings, metrics):
        fleet_client.client = old
        assert versions(old_sessions) == list(range(backed_up + 1))
        overviews = run_windows(old, old_sessions, old_settings, clock, fleet, 2, fleet_client=fleet_client)
        # adopted as the version it runs (the loop may plan past it since)
        assert versions(old_sessions)[:backed_up + 2] == [*range(backed_up + 1), running]
        adopted = [a for a in overviews[-1]["last_actions"] if a["status"] == "adopted"]
        assert [a["placement_version"] for a in adopted] == [running]
        assert adopted[0]["inputs"]["latest_before"] == backed_up
        assert snapshot_answers(metrics) == {"409": 1, "200": 2 * POSTS[protocol]}
        # the windows under the adopted version are complete: the loop planned from them, or would now
        assert versions(old_sessions)[backed_up + 2:] or not [
            p for p in Reconciler(old_settings).run_pass(old_sessions, now=clock.now + 10, dry_run=True).plans
            if "windows under placement" in p.reason]


@protocols
@pytest.mark.parametrize("behind_first", [True, False], ids=["behind-first", "ahead-first"])
def test_instances_left_on_different_versions_converge_on_the_highest(client, sessions, settings, clock,
                                                                      behind_first, protocol):
    ahead = make_fleet(num_deployments=1, ep_size=EP_SIZE, slots_per_rank=10, seed=3)[0]
    behind = dataclasses.replace(ahead, instance="sim-0-decode-1", load=LoadModel(8, 64, 6, seed=4))
    fleet_client = start(client, sessions, settings, clock, [ahead, behind], 4, protocol)
    assert behind.placement_version == ahead.placement_version >= 1
    reskew(ahead, seed=11)  # the behind instance stops reporting while the ahead one moves on
    run_windows(client, sessions, settings, clock, [ahead], 4, fleet_client=fleet_client)
    assert ahead.placement_version > behind.placement_version

    order = [behind, ahead] if behind_first else [ahead, behind]
    with controller_on(sibling(settings.database_url), settings, clock) as (new, new_sessions, new_settings, _):
        fleet_client.client = new
        run_windows(new, new_sessions, new_settings, clock, order, 2, fleet_client=fleet_client)
        assert behind.placement_version == ahead.placement_version
        np.testing.assert_array_equal(behind.slot_to_expert, ahead.slot_to_expert)
        assert versions(new_sessions)[-1] == ahead.placement_version


@pytest.mark.slow
def test_real_agents_keep_running_through_a_database_swap(settings):
    """Real agents (agents/telemetry) over simulated engines; the controller restarted on an empty database:
    no rank restarts, none switches back to v0, each is refused at most once, and the new controller's
    overview counts them and the version they run."""
    settings = settings.model_copy(update={"port": free_port(), "window_seconds": 1.0, "reconcile_seconds": 0.5})
    controller = Controller(settings)
    thread = controller.start()
    engines, agents = make_group(controller.url, link=ControllerLink(controller.url, AGENT_TOKEN, min_backoff=0.1,
                                                                     max_backoff=0.5))
    try:
        switched: list = []
        deadline = time.monotonic() + 60
        while not switched and time.monotonic() < deadline:
            run_group(agents, engines, 2.0, switched)
        running = engines[0].placement.version
        assert running >= 1, "the first controller never issued a placement"
        controller.stop()
        thread.join(timeout=10)

        controller = Controller(settings.model_copy(update={"database_url": sibling(settings.database_url)}))
        thread = controller.start()
        switched, deadline = [], time.monotonic() + 90
        while True:  # windows under the adopted version, measured (slower on a loaded machine)
            run_group(agents, engines, 2.0, switched)
            overview = httpx.get(f"{controller.url}/v1/deployments/tiny/overview").json()
            measured = [h for h in (overview.get("pools") or [{}])[0].get("history", [])
                        if h["placement_version"] >= running and h["imbalance"]]
            if len(measured) >= 2 or time.monotonic() > deadline:
                break
        refusals = httpx.get(f"{controller.url}/metrics").text
    finally:
        for agent in agents:
            agent.close()
        controller.stop()
        thread.join(timeout=10)
    assert all(version >= running for _, _, version in switched), switched  # never back to v0
    assert engines[0].placement.version == engines[1].placement.version
    assert overview["placement_version"]["decode"] >= running  # what the fresh agents run, and agree on
    assert overview["agents"] == {"total": 2, "fresh": 2, "stale": 0, "gone": 0, "unhealthy": []}
    adopted = [a for a in overview["last_actions"] if a["status"] == "adopted"]
    assert [a["placement_version"] for a in adopted] == [running], overview["last_actions"]
    assert sum(a.exporter.failures["placement_unknown"]._value.get() for a in agents) >= 1
    assert sum(a.exporter.failures["http_4xx"]._value.get() for a in agents) == 0
    answers = {s.labels["status"]: s.value for family in text_string_to_metric_families(refusals)
               for s in family.samples if s.name == "moectl_controller_snapshots_total"}
    assert answers.get("409", 0) <= 2 and answers["200"] >= 4, answers  # at most one refusal per rank
    assert len(measured) >= 2, overview["pools"][0]["history"]


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_a_gloo_group_keeps_running_through_a_database_swap(settings, tmp_path):
    """The same swap under an EP group reporting as one (moectl.v2, real agents over a real gloo group,
    tests/support/group_rank.py): rank 0 registers again, sends the group's table after the 409, the new
    controller adopts it and no rank ever switches back."""
    settings = settings.model_copy(update={"port": free_port(), "window_seconds": 1.0, "reconcile_seconds": 0.5})
    controller = Controller(settings)
    thread = controller.start()
    num_ranks, ranks = 2, []
    agents_url = f"{controller.url}/v1/deployments/tiny/pools/decode/agents"
    try:
        env = os.environ | {"PYTHONPATH": f"{REPO}{os.pathsep}{REPO / 'tests'}", "OMP_NUM_THREADS": "1"}
        dist_port = free_port()
        ranks = [subprocess.Popen([sys.executable, "-m", "support.group_rank", str(r), str(num_ranks),
                                   str(dist_port), controller.url, "90", str(tmp_path / "stop")], cwd=REPO, env=env,
                                  stdout=subprocess.PIPE, text=True) for r in range(num_ranks)]
        running, deadline = 0, time.monotonic() + 45
        while running < 1 and time.monotonic() < deadline:  # every rank runs a placement the loop issued
            time.sleep(0.5)
            seen = httpx.get(agents_url, headers=operator())
            reported = [a["placement_version"] for a in seen.json()] if seen.status_code == 200 else []
            running = min(reported) if len(reported) == num_ranks else 0
        assert running >= 1, "the first controller never issued a placement the group ran"
        controller.stop()
        thread.join(timeout=10)

        controller = Controller(settings.model_copy(update={"database_url": sibling(settings.database_url)}))
        thread = controller.start()

        def snapshot_answers() -> dict[str, float]:
            return {s.labels["status"]: s.value for family in
                    text_string_to_metric_families(httpx.get(f"{controller.url}/metrics").text)
                    for s in family.samples if s.name == "moectl_controller_snapshots_total"}

        # the group goes on until the new controller took three of its windows after adopting its table
        until("three windows taken after the swap", lambda: snapshot_answers().get("200", 0) >= 3, 60)
        (tmp_path / "stop").touch()
        outputs = [json.loads(p.communicate(timeout=120)[0].strip().splitlines()[-1]) for p in ranks]
        overview = httpx.get(f"{controller.url}/v1/deployments/tiny/overview", headers=operator()).json()
        answers = snapshot_answers()
    finally:
        for rank in ranks:
            if rank.poll() is None:
                rank.kill()
        controller.stop()
        thread.join(timeout=10)
    assert all(p.returncode == 0 for p in ranks)
    for output in outputs:  # never back to v0 or any version before the one running at the swap
        versions_run = [version for _, version in output["switches"]]
        assert versions_run == sorted(versions_run) and output["version"] >= running, output
    assert len({o["version"] for o in outputs}) == 1  # the ranks agree on what they run
    adopted = [a for a in overview["last_actions"] if a["status"] == "adopted"]
    assert len(adopted) == 1 and adopted[0]["placement_version"] >= running, overview["last_actions"]
    assert overview["agents"]["total"] == num_ranks
    assert answers.get("409", 0) == 1 and answers["200"] >= 3, answers  # one refusal for the whole group
