"""`moectl up` for real: controller + prefill and decode workers (ep_size 2) + router + loadgen as local
processes. All four signals become non-zero on the overview and in /metrics; Ctrl-C leaves no process."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import httpx
import pytest
from support.processes import RANK_PROCESSES, descendants, die_with_parent, is_running
from support.servers import free_port

pytestmark = RANK_PROCESSES

SIGNALS = ("imbalance", "all2all_share", "prefix_hit_ratio", "mtp_acceptance")


def metric(text: str, name: str, **labels: str) -> float:
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name + "{") and all(f'{k}="{v}"' in line for k, v in labels.items()):
            total += float(line.rsplit(" ", 1)[1])
    return total


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_up_runs_the_real_thing_and_stops_clean(tmp_path):
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "controlplane", "up", "--port", str(port), "--window-seconds", "1",
         "--database-url", f"sqlite:///{tmp_path / 'up.db'}", "--rate", "6"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env=os.environ | {"PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1"}, preexec_fn=die_with_parent)
    lines: list[str] = []
    try:
        started = time.monotonic()
        while not any(line.startswith("up in ") for line in lines):
            line = process.stdout.readline()
            assert line, "moectl up exited early:\n" + "".join(lines)
            lines.append(line)
        startup = time.monotonic() - started
        url = f"http://127.0.0.1:{port}"
        router = next(line for line in lines if line.startswith("router: ")).split(": ", 1)[1].strip()
        workers = next(line for line in lines if line.startswith("workers: "))
        ranks = [word for word in workers.split() if word.startswith("http://")]
        assert len(ranks) == 4
        overview = {}

        def is_reporting(o: dict) -> bool:  # every signal measured, every rank fresh (a loaded machine: later)
            return all((o.get(s) or 0) > 0 for s in SIGNALS) and o["agents"]["total"] == 4 and o["agents"]["stale"] == 0

        while time.monotonic() - started < 150:
            overview = httpx.get(f"{url}/v1/deployments/tiny/overview", timeout=10).json()
            if is_reporting(overview):
                break
            time.sleep(1)
        assert is_reporting(overview), overview
        assert 1.0 <= overview["imbalance"] < 4 and 0 < overview["all2all_share"] < 1
        by_position = overview["mtp_acceptance_by_position"]  # the runtime drafts with its MTP head
        assert by_position and all(0 <= a <= 1 for a in by_position), overview
        def metrics_ready() -> tuple[bool, str]:
            text = "\n".join(httpx.get(rank + "/metrics").text for rank in ranks)  # which rank served what varies
            router_text = httpx.get(router + "/metrics").text
            return all((
                metric(text, "moectl_forward_seconds_total") > 0,
                metric(text, "moectl_all2all_seconds_total", phase="dispatch") > 0,
                metric(text, "moectl_prefix_cache_query_tokens_total") > 0,
                metric(text, "moectl_spec_decode_draft_tokens_total") > 0,
                metric(text, "moectl_expert_load_max_to_mean_ratio", layer="0") > 1,
                metric(text, "moectl_agent_info", role="decode") == 2 and metric(text, "moectl_agent_info") == 4,
                metric(router_text, "moectl_router_requests_total", outcome="length") > 0,
            )), text + router_text

        # on a loaded machine the ranks' counters may trail the overview by a step or a finished request
        is_ready, text = metrics_ready()
        while not is_ready and time.monotonic() - started < 200:
            time.sleep(1)
            is_ready, text = metrics_ready()
        assert is_ready, text
        print(f"startup {startup:.1f}s; overview {({s: round(overview[s], 3) for s in SIGNALS})}")
        family = descendants(process.pid)
        assert len(family) >= 8  # 2 launchers + 4 ranks + router + loadgen
    finally:
        process.send_signal(signal.SIGINT)
        output, _ = process.communicate(timeout=60)
    assert process.returncode == 0, "".join(lines) + output
    assert "stopped" in output and "Traceback" not in output, output
    deadline = time.monotonic() + 10
    while any(is_running(pid) for pid in family) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not [pid for pid in family if is_running(pid)], "orphans left behind"
