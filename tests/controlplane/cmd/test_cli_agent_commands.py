"""`moectl <agent command>` becomes the agent program itself (controlplane/cmd/cli.py): a stop signal sent to the
process that was started reaches the program, and nothing is left behind to run as an orphan."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path


def _cmdline(pid: int) -> str:
    return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()


def test_an_agent_command_replaces_the_moectl_process_and_stops_on_sigterm():
    # the router serves until stopped: a long-running agent program (port 0: the system picks a free one)
    proc = subprocess.Popen([sys.executable, "-m", "controlplane", "router", "--host", "127.0.0.1", "--port", "0",
                             "--unified", "http://127.0.0.1:9"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while "agents.router" not in _cmdline(proc.pid) and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert proc.poll() is None, "the router exited at start"
        assert "agents.router" in _cmdline(proc.pid), "moectl runs the agent program as a child"
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
