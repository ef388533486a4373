"""Processes tests start: tied to the test's own life, stopped politely then firmly, and their family read
from /proc (tests that stop a launcher check that no child outlives it)."""

from __future__ import annotations

import ctypes
import signal
import subprocess
from pathlib import Path

import pytest

# a module of tests that each start a group of rank processes running the model: under xdist (make test) they run
# one after another on one worker, not two groups at once on two cores, where each group's windows ran late enough
# to fail its timed assertions and a timed-out test left its ranks running under the next; support/exclusive.py
# keeps two test runs' groups apart on one machine too
RANK_GROUP = "rank_processes"
RANK_PROCESSES = pytest.mark.xdist_group(RANK_GROUP)


def die_with_parent() -> None:
    """A `preexec_fn`: runs in the child before exec and has it SIGKILLed when the process that started it dies.
    Ctrl-C (SIGINT) is the child's default again: a test run started in the background by a shell ignores it
    and every child would inherit that, so the tests' Ctrl-C would never stop what they started."""
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # 1 = PR_SET_PDEATHSIG
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def stop(process: subprocess.Popen, timeout: float = 15.0) -> None:
    """SIGTERM, then SIGKILL if it has not exited within `timeout` seconds."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def descendants(pid: int) -> set[int]:
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found, todo = set(), [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.add(child)
            todo.append(child)
    return found


def is_running(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False
