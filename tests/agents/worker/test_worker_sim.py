"""`moectl worker --sim`: real rank processes (gloo agreement), the real agent over the simulated engine,
against a real controller. Its /metrics carries the names the dashboards use; the controller rebalances and
the group's measured imbalance falls; stopping the launcher stops every rank."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import httpx
import pytest
from support.agent_metrics import AGENT_METRIC_NAMES
from support.auth import AGENT_TOKEN, API_TOKEN
from support.processes import RANK_PROCESSES, descendants, die_with_parent, is_running
from support.servers import free_port, wait_http

from controlplane.cmd.serve import Controller

pytestmark = RANK_PROCESSES


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_sim_worker_reports_and_follows_the_controller(settings):
    settings = settings.model_copy(update={"port": free_port(), "window_seconds": 1.0, "reconcile_seconds": 0.5})
    controller = Controller(settings)
    thread = controller.start()
    # a low threshold: the simulated skew at ep_size 2 swings between ~1.1 and ~1.3 over its period
    model = {"name": "sim-tiny", "num_layers": 4, "num_experts": 32, "num_groups": 4, "top_k": 4, "topk_group": 2}
    policy = {"mode": "auto", "imbalance_threshold": 1.05, "cooldown_seconds": 3, "sustained_windows": 2}
    httpx.put(f"{controller.url}/v1/deployments/tiny", json={"model": model, "policy": policy},
              headers={"Authorization": f"Bearer {API_TOKEN}"}).raise_for_status()
    ports = [free_port(), free_port()]
    worker = subprocess.Popen(
        [sys.executable, "-m", "agents.worker", "--sim", "--role", "decode", "--ep-size", "2", "--ports",
         ",".join(map(str, ports)), "--controller", controller.url, "--window-seconds", "1"],
        env=os.environ | {"MOECTL_AGENT_TOKEN": AGENT_TOKEN, "OMP_NUM_THREADS": "1"}, preexec_fn=die_with_parent)
    try:
        for port in ports:
            wait_http(f"http://127.0.0.1:{port}/healthz", timeout=120)  # a loaded machine starts two ranks slowly
        # every window's imbalance seen, by index: the overview's history slides on, and on a slow machine its
        # first windows (before the rebalance) may have left it by the time the loop has balanced the load
        deadline, index_to_imbalance, overview = time.monotonic() + 90, {}, {}
        while time.monotonic() < deadline:
            overview = httpx.get(f"{controller.url}/v1/deployments/tiny/overview").json()
            history = overview["pools"][0]["history"] if overview.get("pools") else []
            index_to_imbalance |= {p["index"]: p["imbalance"] for p in history if p["imbalance"]}
            imbalances = [index_to_imbalance[i] for i in sorted(index_to_imbalance)]
            if overview.get("placement_version", {}).get("decode") and imbalances and imbalances[-1] < 1.04:
                break
            time.sleep(1)
        assert overview["placement_version"]["decode"] >= 1, overview  # both ranks run the new version
        assert imbalances[0] > 1.05 and imbalances[-1] < 1.04, imbalances
        for port in ports:
            text = httpx.get(f"http://127.0.0.1:{port}/metrics").text
            names = {line.split("{")[0] for line in text.splitlines() if line and not line.startswith("#")}
            assert set(AGENT_METRIC_NAMES) <= names, set(AGENT_METRIC_NAMES) - names
            assert 'runtime="moectl-sim"' in text and "_created" not in text
    finally:
        worker.send_signal(signal.SIGINT)
        assert worker.wait(timeout=30) == 0
        controller.stop()
        thread.join(timeout=10)


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_killed_rank_takes_its_group_down_loudly():
    ports = [free_port(), free_port()]
    worker = subprocess.Popen([sys.executable, "-m", "agents.worker", "--sim", "--ep-size", "2", "--ports",
                               ",".join(map(str, ports))], stderr=subprocess.PIPE, text=True,
                              env=os.environ | {"OMP_NUM_THREADS": "1"})
    try:
        for port in ports:
            wait_http(f"http://127.0.0.1:{port}/healthz", timeout=60)
        ranks = sorted(descendants(worker.pid))
        victim = next(pid for pid in ranks if "--rank\x001" in open(f"/proc/{pid}/cmdline").read())
        os.kill(victim, signal.SIGKILL)
        _, stderr = worker.communicate(timeout=60)
    finally:
        if worker.poll() is None:
            worker.kill()
    assert worker.returncode != 0  # the instance is gone, and says so: a half group cannot serve
    assert "rank 1 exited with code -9" in stderr, stderr[-2000:]
    assert not [pid for pid in ranks if is_running(pid)]
