"""`moectl sim` (`python -m agents.sim`): the simulated fleet as its own process against a controller URL,
with the flags it always had."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys

import httpx
import pytest
from support.auth import AGENT_TOKEN, API_TOKEN, operator
from support.servers import free_port

from agents.sim.run import main
from controlplane.cmd.serve import Controller


def test_without_tokens_it_says_which_it_needs(monkeypatch, capsys):
    monkeypatch.delenv("MOECTL_API_TOKEN", raising=False)
    monkeypatch.delenv("MOECTL_AGENT_TOKEN", raising=False)
    assert main(["--url", "http://127.0.0.1:1", "--windows", "1"]) == 2
    assert "--api-token and --agent-token" in capsys.readouterr().out


@contextlib.contextmanager
def serving(settings, window_seconds: float):
    """A controller without its loop, for `moectl sim` to post to."""
    controller = Controller(settings.model_copy(update={"port": free_port(), "window_seconds": window_seconds}),
                            run_loop=False)
    thread = controller.start()
    try:
        yield controller
    finally:
        controller.stop()
        thread.join(timeout=10)


def sim(controller: Controller, *args: str, timeout: float) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "controlplane", "sim", "--url", controller.url, "--api-token", API_TOKEN,
         "--agent-token", AGENT_TOKEN, "--mode", "observe", *args],
        capture_output=True, text=True, timeout=timeout, env=os.environ | {"MOECTL_API_TOKEN": ""})
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_moectl_sim_registers_its_deployments_and_posts_windows(settings):
    with serving(settings, 1.0) as controller:
        sim(controller, "--deployments", "2", "--ep-size", "4", "--slots-per-rank", "20", "--window-seconds", "1",
            "--windows", "3", timeout=90)
        listed = httpx.get(f"{controller.url}/v1/deployments", headers=operator()).json()
        assert {(d["name"], d["mode"]) for d in listed} == {("sim-0", "observe"), ("sim-1", "observe")}, listed
        for name in ("sim-0", "sim-1"):
            overview = httpx.get(f"{controller.url}/v1/deployments/{name}/overview").json()
            assert overview["agents"]["total"] == 4, overview


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_moectl_sim_drives_a_deepseek_v3_fleet(settings):
    """`--model deepseek-v3`: one deployment with a prefill EP32 and a decode EP320 instance, each posting one
    group snapshot per window (moectl.v2)."""
    with serving(settings, 3.0) as controller:
        sim(controller, "--model", "deepseek-v3", "--prefill-instances", "1", "--decode-instances", "1",
            "--window-seconds", "3", "--windows", "3", timeout=240)
        overview = httpx.get(f"{controller.url}/v1/deployments/deepseek-v3/overview").json()
        metrics = httpx.get(f"{controller.url}/metrics").text
    assert overview["model"] | {"name": "deepseek-v3"} == {
        "name": "deepseek-v3", "num_layers": 58, "num_experts": 256, "num_groups": 8, "top_k": 8, "topk_group": 4}
    assert {(p["role"], p["ep_size"], p["slots_per_rank"]) for p in overview["pools"]} == {
        ("prefill", 32, 9), ("decode", 320, 1)}
    assert overview["agents"]["total"] == 352
    accepted = float(next(line.split()[-1] for line in metrics.splitlines()
                          if line.startswith('moectl_controller_snapshots_total{status="200"}')))
    assert accepted == 2 * 3  # one post per instance and window, not one per GPU
