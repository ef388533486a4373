"""`moectl up` (what `make run` runs): a real process, real HTTP; the status numbers fall; Ctrl-C stops it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import httpx
import pytest
from support.processes import RANK_PROCESSES, die_with_parent
from support.servers import free_port

pytestmark = RANK_PROCESSES


@pytest.mark.slow
def test_up_serves_the_status_page_and_the_imbalance_falls(tmp_path):
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "controlplane", "up", "--sim", "--port", str(port), "--window-seconds", "1",
         "--database-url", f"sqlite:///{tmp_path / 'up.db'}"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=os.environ | {"PYTHONUNBUFFERED": "1"},
        preexec_fn=die_with_parent)
    try:
        started = time.monotonic()
        lines = []
        while not any(line.startswith("controller: ") for line in lines):
            line = process.stdout.readline()
            assert line, "moectl up exited early:\n" + "".join(lines)
            lines.append(line)
        url = next(line for line in lines if line.startswith("controller: ")).split(": ", 1)[1].strip()
        assert url == f"http://127.0.0.1:{port}"
        assert "moectl" in httpx.get(url + "/").text

        first, last = None, None
        while time.monotonic() - started < 60:
            response = httpx.get(f"{url}/v1/deployments/sim-0/overview")
            pools = response.json()["pools"] if response.status_code == 200 else []
            history = [h["imbalance"] for h in (pools[0]["history"] if pools else []) if h["imbalance"] is not None]
            if history:
                first, last = first or history[0], history[-1]
                if last < 1.3 and first >= 1.8:
                    break
            time.sleep(0.5)
        assert first is not None and first >= 1.8, first
        assert last < 1.3, (first, last)
        status = subprocess.run([sys.executable, "-m", "controlplane", "status", "--url", url],
                                capture_output=True, text=True, timeout=30)
        assert status.returncode == 0 and "sim-0" in status.stdout and "auto" in status.stdout
    finally:
        process.send_signal(signal.SIGINT)
        output, _ = process.communicate(timeout=30)
    assert process.returncode == 0, output
    assert "stopped" in output
    with pytest.raises(httpx.ConnectError):
        httpx.get(url + "/healthz", timeout=2)
