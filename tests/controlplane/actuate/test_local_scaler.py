"""The embedded pool scaler with real processes: `agents.worker --sim` instances (the real agent and worker
API over a simulated engine) and a real router process. Instances start, are registered once ready, and on a
scale-down are drained first, removed from the router only when nothing is in flight there, then stopped; a
dead instance is forgotten; stopping leaves no process behind."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

import httpx
import pytest
from support.processes import RANK_PROCESSES, descendants, die_with_parent, is_running, stop
from support.servers import free_port

from controlplane.actuate.fence import SOLE
from controlplane.actuate.local import LocalScaler, LocalWorkers
from controlplane.actuate.scaler import PoolRef

pytestmark = RANK_PROCESSES

TOKEN = "local-scaler-test"
DECODE = PoolRef("tiny", "decode")


def wait_for(predicate, timeout: float = 90.0, what: str = "") -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


@pytest.fixture
def stack():
    port = free_port()
    env = os.environ | {"MOECTL_ROUTER_ADMIN_TOKEN": TOKEN, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1"}
    router = subprocess.Popen([sys.executable, "-m", "agents.router", "--port", str(port)], env=env,
                              preexec_fn=die_with_parent)
    url = f"http://127.0.0.1:{port}"
    workers = LocalWorkers("tiny", {"decode": 1}, env=env | {"MOECTL_URL": ""}, args=["--sim", "--window-seconds", "1"])
    scaler = LocalScaler(workers, router=url, admin_token=TOKEN, drain_timeout=60, poll_seconds=0.2)
    try:
        yield scaler, url
    finally:
        scaler.stop()
        stop(router)


def listed(url: str) -> dict[str, dict]:
    answer = httpx.get(f"{url}/admin/instances", headers={"Authorization": f"Bearer {TOKEN}"}, timeout=5)
    return {i["name"]: i for i in answer.json()}


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_instances_start_serve_drain_and_stop(stack):
    scaler, url = stack
    assert scaler.manages(DECODE) and not scaler.manages(PoolRef("tiny", "prefill"))
    assert scaler.read(DECODE).replicas == 0
    state = scaler.set_replicas(DECODE, 2, expected=0, fence=SOLE)
    assert state.replicas == 2 and state.running == 0 and state.is_ours  # asked for, not serving yet
    wait_for(lambda: scaler.read(DECODE).running == 2, what="two instances serving")
    assert set(listed(url)) == {"tiny-decode-0", "tiny-decode-1"}
    family = {pid for i in scaler.instances.values() for pid in (i.process.pid, *descendants(i.process.pid))}

    # a long request (about half a minute of simulated decoding); the instance serving it is chosen to leave
    outcome, first = {}, threading.Event()

    def long_request() -> None:
        with httpx.stream("POST", f"{url}/v1/completions", timeout=240,
                          json={"prompt": "hello", "max_tokens": 6000, "stream": True}) as response:
            outcome["status"] = response.status_code
            lines = response.iter_lines()
            next(lines)
            first.set()
            outcome["body"] = "".join(lines)

    thread = threading.Thread(target=long_request)
    thread.start()
    assert first.wait(60)
    busy = next(name for name, i in listed(url).items() if i["num_in_flight"] == 1)
    stays = ({"tiny-decode-0", "tiny-decode-1"} - {busy}).pop()
    leaving = scaler.instances[busy]

    assert scaler.prepare_scale_down(DECODE, 1, fence=SOLE, chosen=(busy,)) == [busy]
    assert listed(url)[busy]["state"] == "draining"  # drained before the size changes
    after = scaler.set_replicas(DECODE, 1, expected=2, fence=SOLE)
    assert after.replicas == 1 and after.running == 2  # the leaving one still runs while it drains
    for _ in range(3):  # new requests go to the instance that stays
        assert httpx.post(f"{url}/v1/completions", json={"prompt": "x", "max_tokens": 2}, timeout=60).status_code == 200
    time.sleep(1.0)
    assert "body" not in outcome, "the long request ended too soon to show the drain"
    assert listed(url)[busy]["num_in_flight"] == 1 and leaving.process.poll() is None  # held while it runs

    thread.join(240)
    assert outcome["status"] == 200 and "[DONE]" in outcome["body"]  # the drained instance finished it
    wait_for(lambda: busy not in listed(url), what="the removal")
    wait_for(lambda: leaving.process.poll() is not None, timeout=30, what="the process to stop")
    assert scaler.read(DECODE).running == 1 and list(scaler.instances) == [stays]

    scaler.stop()
    wait_for(lambda: not [pid for pid in family if is_running(pid)], timeout=30, what="no process left")
    # the controller's loop can outlive the scaler by a moment: what it asks for then starts nothing
    assert scaler.set_replicas(DECODE, 2, expected=1, fence=SOLE).replicas == 0
    with pytest.raises(RuntimeError, match="stopping"):
        scaler.start("decode")
    assert not scaler.instances


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_a_dead_instance_is_forgotten_and_a_starting_one_leaves_at_once(stack):
    scaler, url = stack
    scaler.set_replicas(DECODE, 1, expected=0, fence=SOLE)
    wait_for(lambda: scaler.read(DECODE).running == 1, what="one instance serving")
    first = scaler.instances["tiny-decode-0"]
    first.process.kill()
    wait_for(lambda: scaler.read(DECODE).replicas == 0, what="the dead instance forgotten")
    assert listed(url) == {}
    # asked for and dropped again before it serves: it never reaches the router
    scaler.set_replicas(DECODE, 1, expected=0, fence=SOLE)
    assert scaler.prepare_scale_down(DECODE, 1, fence=SOLE) == ["tiny-decode-1"]
    wait_for(lambda: not scaler.instances, timeout=30, what="the starting instance stopped")
    assert listed(url) == {}
