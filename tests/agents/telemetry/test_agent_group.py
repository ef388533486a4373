"""An EP group's agents reporting as one (moectl.v2) over a real gloo group: rank 0 posts one body per window
for the whole group, the controller files every rank's load and freshness from it, and the answer reaches
every rank, which switch placement at the same step."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from support.auth import operator
from support.processes import RANK_PROCESSES
from support.servers import free_port

from controlplane.cmd.serve import Controller
from controlplane.store import deployments, windows
from controlplane.store.db import make_engine, make_sessions

pytestmark = RANK_PROCESSES

REPO = Path(__file__).resolve().parents[3]
EP_SIZE = 3


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_a_gloo_group_posts_one_body_per_window_and_switches_together(settings):
    settings = settings.model_copy(update={"port": free_port(), "window_seconds": 1.0, "reconcile_seconds": 0.5})
    controller = Controller(settings)
    thread = controller.start()
    try:
        env = os.environ | {"PYTHONPATH": f"{REPO}{os.pathsep}{REPO / 'tests'}", "OMP_NUM_THREADS": "1"}
        dist_port = free_port()
        ranks = [subprocess.Popen([sys.executable, "-m", "support.group_rank", str(r), str(EP_SIZE), str(dist_port),
                                   controller.url, "14"], cwd=REPO, env=env, stdout=subprocess.PIPE, text=True)
                 for r in range(EP_SIZE)]
        outputs = [json.loads(p.communicate(timeout=150)[0].strip().splitlines()[-1]) for p in ranks]
        assert all(p.returncode == 0 for p in ranks)
        posted = httpx.get(f"{controller.url}/metrics").text
        overview = httpx.get(f"{controller.url}/v1/deployments/tiny/overview", headers=operator()).json()
    finally:
        controller.stop()
        thread.join(timeout=10)

    by_rank = sorted(outputs, key=lambda o: o["rank"])
    assert len({o["windows"] for o in by_rank}) == 1 and by_rank[0]["windows"] >= 8  # every rank closed each
    assert [o["has_poster"] for o in by_rank] == [True] + [False] * (EP_SIZE - 1)  # only rank 0 talks
    # one request per window for the whole group (the deployment's registration aside)
    accepted = float(next(line.split()[-1] for line in posted.splitlines()
                          if line.startswith('moectl_controller_snapshots_total{status="200"}')))
    assert accepted == by_rank[0]["posted"] >= by_rank[0]["windows"] - 1
    assert overview["agents"]["total"] == EP_SIZE
    # the loop's placement reached every rank through rank 0, and they switched at the same step
    assert by_rank[0]["switches"], "the loop never changed the placement"
    assert all(o["switches"] == by_rank[0]["switches"] for o in by_rank)
    engine = make_engine(settings.database_url, timeout_seconds=settings.db_timeout_seconds)
    with make_sessions(engine)() as session:
        deployment = deployments.get(session, "tiny")
        pool = deployments.get_pool(session, deployment, "decode")
        stored = windows.recent(session, pool, before_index=2**31 - 1, limit=100)
        agents = deployments.find_agents(session, pool)
    engine.dispose()
    assert stored and all(w.num_reports == EP_SIZE for w in stored)  # every rank in every window filed
    assert all(w.is_slot_load_complete(EP_SIZE) for w in stored if w.num_slot_reports == w.num_reports)
    assert [(a.rank, a.gpu_uuid) for a in agents] == [(r, f"GPU-{r}") for r in range(EP_SIZE)]
    # each rank is an agent of its own, seen with every post of its group: fresh exactly when the group is
    assert len({a.last_seen for a in agents}) == 1 and all(a.num_windows == by_rank[0]["posted"] for a in agents)
