"""The pool planner closes its loop on real workers: `moectl up` (controller, local pool scaler, router, runtime
instances of one rank each) under a workload that steps up and falls back. The step makes the controller add a
decode instance; the fall makes it drain one and remove it; every request of the workload succeeds meanwhile.

The decode capacity is the batch slots of an instance (`--max-num-seqs 2`): by Little's law a pool needs
rate x output tokens x ITL sequences in flight, which the planner's latency model predicts from the instances'
windows (the engine's own ITL, per token). How fast a token is depends on how busy this shared machine is, so
the step is sized from the decode rank's ITL the warm-up measured: 1.2x what one instance's slots carry at that
ITL (a fuller batch steps slower, so one instance carries less), which two carry; the fall is 0.05x, a fifth
of what one sequence at a time carries, since the model has by then learnt from the step how much slower a
full batch on a busy machine steps. The warm-up sends one request at a time (the load generator skips
arrivals while one is in flight), so however slow the machine is, it never needs a second instance: a Poisson
warm-up at a fixed rate is, on a busy machine, a few seconds' burst the reactive step rightly answers. The SLO
is loose enough that noise never breaches it: what moves the pool is the load. About five minutes on two cores:
the fall ends once the drained instance is gone.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time

import httpx
import pytest
from support.processes import die_with_parent
from support.up import moectl_up

POLICY = {"mode": "auto", "slo": {"ttft_p90_seconds": 30.0, "itl_p90_seconds": 2.0},
          "replicas": {"prefill": {"min": 1, "max": 1}, "decode": {"min": 1, "max": 2}},
          "pool_cooldown_seconds": 30.0, "pool_predictive_interval_seconds": 10.0}
# sequences one decode instance batches; tokens per request. Two slots keep the decode slots the bottleneck: on
# an idle machine a token takes ~2 ms, and four slots' 1.2x (13.6 req/s, 2,200 tokens/s streamed) was more than
# the router, the load generator and the workers on two cores serve, so its backlog passed the load generator's
# 512 in flight and arrivals went unsent
SLOTS, OUTPUT_TOKENS = 2, 160
PHASES = (("warm-up", 70.0), ("step up", 110.0), ("fall", 240.0))  # seconds each (the fall: at most)


def size_actions(url: str) -> list[dict]:
    actions = httpx.get(f"{url}/v1/deployments/tiny/actions", params={"limit": 100}, timeout=10).json()
    return sorted((a for a in actions if a["kind"] == "pool_size" and a["role"] == "decode"), key=lambda a: a["id"])


def mean_itl(rank: str) -> float:
    """Seconds per generated token on a worker rank so far (its agent's histogram: sum / count)."""
    text = httpx.get(f"{rank}/metrics", timeout=10).text
    value = {name: sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                       if line.startswith(f"moectl_inter_token_latency_seconds_{name}{{"))
             for name in ("sum", "count")}
    return value["sum"] / value["count"]


def run_loadgen(router: str, rate: float, seconds: float, env: dict, on_wait, max_concurrency: int = 512,
                is_done=lambda: False) -> tuple[int, int, int]:
    """(done, failed, not sent) of a workload at `rate` for `seconds`, at most `max_concurrency` requests in
    flight; on_wait() is called while it runs; once is_done(), it sends nothing new (SIGINT) and its requests in
    flight finish."""
    process = subprocess.Popen(
        [sys.executable, "-m", "agents.loadgen", "--url", router, "--rate", f"{rate:.3f}", "--duration",
         f"{seconds:g}", "--max-tokens", str(OUTPUT_TOKENS), "--max-chars", "200", "--timeout", "300",
         "--max-concurrency", str(max_concurrency), "--report-seconds", "30"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, preexec_fn=die_with_parent)
    launched = time.monotonic()
    try:
        is_stopping = False
        while process.poll() is None:
            on_wait()
            # not while it may still be importing: Ctrl-C then ends it with a traceback and no totals
            if not is_stopping and time.monotonic() - launched > 10 and is_done():
                process.send_signal(signal.SIGINT)
                is_stopping = True
            time.sleep(2)
        output = process.stdout.read()
    finally:
        if process.poll() is None:
            process.kill()
    total = re.search(r"loadgen total: (\d+) done, (\d+) failed, (\d+) not sent", output)
    assert total, output
    print("\n".join(line for line in output.strip().splitlines() if "request failed" in line or "total" in line))
    return tuple(map(int, total.groups()))


@pytest.mark.slow
@pytest.mark.exclusive  # the step is sized from the warm-up's ITL: another test beside it changes the machine's speed
@pytest.mark.timeout(1200)
def test_a_step_in_traffic_adds_a_decode_instance_and_the_fall_drains_one(tmp_path):
    env = os.environ | {"PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1"}
    with moectl_up(tmp_path, "--window-seconds", "2", "--ep-size", "1", "--max-num-seqs", str(SLOTS), "--no-loadgen",
                   "--policy", json.dumps(POLICY)) as up:
        url, text = up.url, up.text()
        router = re.search(r"^router: (\S+)", text, re.M).group(1)
        decode_rank = re.search(r"^workers: .*?\| decode (http\S+)", text, re.M).group(1)
        found: dict[str, dict] = {}

        def watch() -> None:
            actions = size_actions(url)
            up_action = next((a for a in actions if a["predicted"]["replicas_after"] == 2), None)
            if up_action is not None:
                found["up"] = up_action
                down = next((a for a in actions if a["id"] > up_action["id"] and a["predicted"]["replicas_after"] == 1
                             and a["status"] == "verified"), None)
                if down is not None:
                    found["down"] = down

        started = time.monotonic()
        warm_done, warm_failed, _ = run_loadgen(router, 1.0, PHASES[0][1], env, watch, max_concurrency=1)
        assert warm_done > 5 and warm_failed == 0
        itl = mean_itl(decode_rank)
        one_instance = SLOTS / ((OUTPUT_TOKENS - 1) * itl)  # requests/s one decode instance's slots carry
        print(f"warm-up: {itl * 1000:.1f} ms per token: one decode instance carries {one_instance:.2f} req/s")
        assert "up" not in found, f"it scaled up before the step: {found.get('up')}"
        stepped = time.time()
        totals = [run_loadgen(router, 1.2 * one_instance, PHASES[1][1], env, watch)]
        # arrivals stop when the step's time is up; its loadgen exits only once the backlog it left is served
        # (on two busy cores, a minute or more later), and the planner rightly sees the fall from the first
        fell = stepped + PHASES[1][1]
        totals.append(run_loadgen(  # the fall lasts until the drained instance is gone, PHASES' time at most
            router, 0.05 * one_instance, PHASES[2][1], env, lambda: watch() if "down" not in found else None,
            is_done=lambda: "down" in found and "removed and stopped" in up.text()))
        text = up.text()
        assert "up" in found, "no decode instance was added:\n" + text[-6000:]
        up_action, down_action = found["up"], found.get("down")
        assert stepped < up_action["created_at"] < fell, "the step did not add the decode instance"
        assert up_action["status"] in ("applied", "verified") and up_action["trigger"] == "loop"
        assert up_action["reason"] and up_action["predicted"]["replicas_before"] == 1
        assert down_action is not None, "no decode instance was drained and removed:\n" + text[-6000:]
        assert down_action["created_at"] > fell, "it drained an instance before the traffic fell"
        assert down_action["reason"].startswith("consolidate") and down_action["predicted"]["replicas_before"] == 2
        # drained first, removed only then, and the process stopped
        leaving = down_action["measured"]["leaving"]
        assert len(leaving) == 1
        draining, removed = text.index(f"{leaving[0]}: draining"), text.index(f"{leaving[0]}: removed and stopped")
        assert draining < removed
        print(f"scale-up {up_action['created_at'] - stepped:.0f}s after the step: {up_action['reason']}")
        print(f"scale-down {down_action['created_at'] - fell:.0f}s after the fall: {down_action['reason']}")
        done, failed, not_sent = (sum(t[i] for t in totals) for i in range(3))
        print(f"workload: {done} requests done, {failed} failed, {not_sent} not sent in "
              f"{time.monotonic() - started:.0f}s")
        assert done > 20 and failed == 0 and not_sent == 0
        overview = httpx.get(f"{url}/v1/deployments/tiny/overview", timeout=10).json()
        decode = next(p for p in overview["pool_plan"]["pools"] if p["role"] == "decode")
        assert decode["replicas"] == 1 and overview["pool_plan"]["slo"] == {"ttft_p90": 30.0, "itl_p90": 2.0}
        status = subprocess.run([sys.executable, "-m", "controlplane", "status", "--url", url], capture_output=True,
                                text=True, timeout=60)
        assert "pools: prefill 1" in status.stdout and "last scaling:" in status.stdout, status.stdout
