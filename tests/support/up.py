"""`moectl up` with real workers as a test's subprocess: started on a free port, ready once it says it is up,
stopped with Ctrl-C as a person's terminal sends it (SIGINT to the whole foreground process group), and
required to exit cleanly: code 0, no traceback while stopping, no process of its family left."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

from support.processes import descendants, die_with_parent, is_running
from support.servers import free_port

START_SECONDS = 240.0  # `moectl up` to say it is up (a cold machine imports torch in each worker)
STOP_SECONDS = 90.0  # Ctrl-C to exit: its own stop is bounded at about 70 s (controlplane/cmd/local_stack.py)


@dataclass(frozen=True)
class Up:
    url: str  # the controller's
    lines: list[str]  # what it printed so far (filled as it prints)

    def text(self) -> str:
        return "".join(self.lines)


@contextmanager
def moectl_up(tmp_path: Path, *args: str) -> Iterator[Up]:
    """args: `moectl up` options besides port and database. At most START_SECONDS + STOP_SECONDS besides the
    body: a test's timeout leaves that much, so what fails is an assertion that shows what `up` printed."""
    port, began = free_port(), time.monotonic()
    process = subprocess.Popen(
        [sys.executable, "-m", "controlplane", "up", "--port", str(port), *args,
         "--database-url", f"sqlite:///{tmp_path / 'up.db'}"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
        preexec_fn=die_with_parent, env=os.environ | {"PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1"})
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(process.stdout), daemon=True)
    reader.start()
    try:
        deadline = began + START_SECONDS
        while not any(line.startswith("up in ") for line in lines):
            assert process.poll() is None and time.monotonic() < deadline, \
                f"moectl up did not start in {time.monotonic() - began:.0f}s:\n" + "".join(lines)
            time.sleep(0.1)
        started_in = time.monotonic() - began
        yield Up(f"http://127.0.0.1:{port}", lines)
    finally:
        family, stopping_at, stopped = descendants(process.pid), len(lines), time.monotonic()
        os.killpg(process.pid, signal.SIGINT)  # Ctrl-C: up, and any child still in its process group
        try:
            process.wait(timeout=STOP_SECONDS)
        except subprocess.TimeoutExpired as exc:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
            raise AssertionError(f"moectl up did not exit {STOP_SECONDS:.0f}s after Ctrl-C (killed); what it printed "
                                 f"while stopping:\n{''.join(lines[stopping_at:])}") from exc
        finally:
            reader.join(timeout=10)
    stopping = "".join(lines[stopping_at:])
    # shown with a failure after this: where a slow run spent its time
    print(f"moectl up: up in {started_in:.0f}s, ran {stopped - began - started_in:.0f}s, "
          f"stopped in {time.monotonic() - stopped:.0f}s")
    assert process.returncode == 0, stopping
    assert "Traceback" not in stopping, stopping
    deadline = time.monotonic() + 10  # a process killed with its parent (PR_SET_PDEATHSIG) needs a moment
    while [pid for pid in family if is_running(pid)] and time.monotonic() < deadline:
        time.sleep(0.2)
    left = {pid: _command(pid) for pid in family if is_running(pid)}
    assert not left, f"left running after Ctrl-C: {left}\n{stopping}"


def _command(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()[:160]
    except OSError:
        return "(gone)"


def actions_of(url: str, kind: str, deployment: str = "tiny") -> list[dict]:
    """The deployment's actions of `kind`, oldest first; none while the controller does not answer."""
    response = httpx.get(f"{url}/v1/deployments/{deployment}/actions", timeout=10)
    return [a for a in reversed(response.json()) if a["kind"] == kind] if response.status_code == 200 else []
