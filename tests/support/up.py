"""`moectl up` with real workers as a test's subprocess: started on a free port, ready once the router is up,
stopped with Ctrl-C (SIGINT) as a person would, and required to exit cleanly."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

from support.servers import free_port


@contextmanager
def moectl_up(tmp_path: Path, *args: str) -> Iterator[str]:
    """args: `moectl up` options besides port and database; yields the controller's URL."""
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "controlplane", "up", "--port", str(port), *args,
         "--database-url", f"sqlite:///{tmp_path / 'up.db'}"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env=os.environ | {"PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1"})
    try:
        lines: list[str] = []
        while not any(line.startswith("router: ") for line in lines):
            line = process.stdout.readline()
            assert line, "moectl up exited early:\n" + "".join(lines)
            lines.append(line)
        yield f"http://127.0.0.1:{port}"
    finally:
        process.send_signal(signal.SIGINT)
        process.communicate(timeout=60)
    assert process.returncode == 0


def actions_of(url: str, kind: str, deployment: str = "tiny") -> list[dict]:
    """The deployment's actions of `kind`, oldest first; none while the controller does not answer."""
    response = httpx.get(f"{url}/v1/deployments/{deployment}/actions", timeout=10)
    return [a for a in reversed(response.json()) if a["kind"] == kind] if response.status_code == 200 else []
