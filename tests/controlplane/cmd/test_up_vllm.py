"""`moectl up --engine vllm` closes the pool planner's loop on real vLLM servers (the CPU build and tiny DeepSeek-V3 of
`make engines`): one server at rest; the workload steps up, the servers report requests waiting and their TTFT, and
the controller adds a second (an action, verified once it runs); the step ends, the pool is calm for the cooldown, and
the controller drains one (the router stops sending it requests, those in flight finish) and stops it. No request of
the workload fails meanwhile, every server's expert counts reach the deployment's heatmap, and every action is
verified. A few minutes on two cores: most of it is the second server starting under the step's load.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time

import httpx
import pytest
from support.engines.vllm_server import model_dir, require_vllm
from support.up import moectl_up

from controlplane.cmd.up_vllm import DEPLOYMENT, ROLE, VLLM_POLICY

# the servers' batch is 8 sequences: 12 requests/s keeps more than that in flight on two cores, 1 request/s one. The
# step outlasts the second server's start under it (1-3 minutes on a loaded 2-core machine), so both serve it
SCHEDULE = "0:1,10:12,240:0.5"
POLICY = VLLM_POLICY | {"pool_cooldown_seconds": 20.0}
MAX_SECONDS = 600  # for the whole loop to close once `up` is up: a second vLLM starts in 1-3 minutes under the step


def get(url: str, path: str, token: str) -> dict | list | None:
    try:
        response = httpx.get(f"{url}{path}", headers={"Authorization": f"Bearer {token}"}, timeout=10)
    except httpx.HTTPError:
        return None
    return response.json() if response.status_code == 200 else None


def served_requests(url: str) -> float | None:
    """vllm:request_success_total of the server at `url` (None: it does not answer): its warm-up request
    (agents/adapters/vllm/instance.py) and what the router sent it."""
    try:
        text = httpx.get(f"{url}/metrics", timeout=5).text
    except httpx.HTTPError:
        return None
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith("vllm:request_success_total"))


def pool_sizes(actions: list[dict]) -> list[tuple[int, int, str]]:
    """(replicas before, after, status) of the pool-size actions, oldest first."""
    return [(a["predicted"]["replicas_before"], a["predicted"]["replicas_after"], a["status"])
            for a in sorted(actions, key=lambda a: a["id"]) if a["kind"] == "pool_size"]


def test_without_the_vllm_build_it_names_the_make_target_its_cost_and_exits_non_zero(tmp_path):
    result = subprocess.run([sys.executable, "-m", "controlplane", "up", "--engine", "vllm", "--database-url",
                             f"sqlite:///{tmp_path / 'up.db'}"], capture_output=True, text=True, timeout=120,
                            env=os.environ | {"MOECTL_ENGINE_CACHE": str(tmp_path / "empty")})
    assert result.returncode == 3, result.stdout + result.stderr
    assert "`make engines`" in result.stdout and "GB" in result.stdout and "minutes" in result.stdout, result.stdout
    assert str(tmp_path / "empty") in result.stdout  # where it looked
    assert not (tmp_path / "up.db").exists()  # nothing started


@pytest.mark.slow
@pytest.mark.exclusive  # two vLLM servers take both cores: nothing else beside it
@pytest.mark.timeout(1200)
def test_up_vllm_grows_the_pool_under_a_step_and_drains_it_after(tmp_path):
    require_vllm()
    model_dir()
    fresh_seen: set[str] = set()
    heatmap_with_both = 0.0  # the heatmap window's tokens while both servers reported
    num_served: dict[str, float] = {}  # per server: the requests vLLM itself counted finished (its /metrics)
    with moectl_up(tmp_path, "--engine", "vllm", "--schedule", SCHEDULE, "--schedule-period", "100000",
                   "--policy", json.dumps(POLICY), "--fresh") as up:
        token = re.search(r"^api token: (\S+)$", up.text(), re.M).group(1)
        assert "moectl cannot move vLLM's experts on a CPU" in up.text()
        deadline = time.monotonic() + MAX_SECONDS
        sizes: list[tuple[int, int, str]] = []
        while time.monotonic() < deadline:
            sizes = pool_sizes(get(up.url, f"/v1/deployments/{DEPLOYMENT}/actions", token) or [])
            agents = get(up.url, f"/v1/deployments/{DEPLOYMENT}/pools/{ROLE}/agents", token) or []
            fresh = {a["instance"] for a in agents if a["state"] == "fresh"}
            fresh_seen |= fresh
            load = get(up.url, f"/v1/deployments/{DEPLOYMENT}/pools/{ROLE}/load", token)
            if load is not None and len(fresh) == 2:
                heatmap_with_both = max(heatmap_with_both, min(map(sum, load["expert_tokens"])))
            for name, url in re.findall(r"^(\S+): vLLM serving on (\S+);", up.text(), re.M):
                counted = served_requests(url)
                if counted is not None:
                    num_served[name] = max(num_served.get(name, 0.0), counted)
            if [s[:2] for s in sizes] == [(1, 2), (2, 1)] and all(s[2] == "verified" for s in sizes) \
                    and len(fresh) == 1:
                break
            time.sleep(2)
        actions = get(up.url, f"/v1/deployments/{DEPLOYMENT}/actions", token) or []
        plan = (get(up.url, f"/v1/deployments/{DEPLOYMENT}/overview", token) or {}).get("pool_plan")
    text = up.text()
    assert [s[:2] for s in sizes] == [(1, 2), (2, 1)], \
        f"pool-size actions {sizes}; the plan now: {plan}\n{text[-4000:]}"
    assert all(a["status"] == "verified" for a in actions), [(a["id"], a["kind"], a["status"]) for a in actions]
    assert len(fresh_seen) == 2, f"servers that reported: {sorted(fresh_seen)}"
    # both servers served the workload (vLLM's own counters, beyond the warm-up request) and, while both reported,
    # every layer of the deployment's heatmap held counts: the pool's window sums every server's (no per-server split)
    assert set(num_served) == fresh_seen and all(v > 1 for v in num_served.values()), num_served
    assert heatmap_with_both > 0
    # the drain: the router stopped sending, the requests in flight finished; no request of the run failed
    assert re.search(r"drained|draining", text), text[-3000:]
    totals = re.findall(r"loadgen total: (\d+) done, (\d+) failed", text)
    assert totals and int(totals[-1][0]) > 0 and totals[-1][1] == "0", totals
    failing = [line for line in text.splitlines() if re.search(r"failed [1-9]", line)]
    assert not failing, failing
