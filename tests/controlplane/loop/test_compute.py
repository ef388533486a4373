"""Planning in a worker process (controlplane/loop/compute.py): the same answer as in the calling thread, from
another process; a worker that dies fails its call and the next call gets a new one; `start` has the worker
up before the first plan; a controller killed outright leaves no worker behind."""

from __future__ import annotations

import multiprocessing
import os
import signal
import subprocess
import sys
import time
from concurrent.futures.process import BrokenProcessPool

import pytest

from controlplane.loop.compute import WorkerProcess, in_process


def test_a_worker_answers_as_the_calling_thread_does_from_another_process():
    compute = WorkerProcess()
    try:
        assert compute(divmod, 17, 5) == in_process(divmod, 17, 5) == (3, 2)
        assert compute(os.getpid) != os.getpid()
    finally:
        compute.close()


def test_a_killed_worker_fails_its_call_and_the_next_call_starts_another():
    compute = WorkerProcess()
    try:
        first = compute(os.getpid)
        with pytest.raises(BrokenProcessPool):
            compute(os.kill, first, signal.SIGKILL)
        second = compute(os.getpid)
        assert second not in (first, os.getpid())
    finally:
        compute.close()


def test_start_has_the_worker_running_before_the_first_call():
    before = {p.pid for p in multiprocessing.active_children()}
    compute = WorkerProcess()
    try:
        compute.start(divmod)
        started = {p.pid for p in multiprocessing.active_children()} - before
        assert len(started) == 1
        assert compute(os.getpid) in started  # the first call runs there, no new process
    finally:
        compute.close()


def test_a_controller_killed_outright_leaves_no_worker_behind(tmp_path):
    """SIGKILL gives the controller no chance to stop its worker; the worker must notice on its own."""
    script = ("import os, signal\n"
              "from controlplane.loop.compute import WorkerProcess\n"
              "compute = WorkerProcess()\n"
              "print(compute(os.getpid), flush=True)\n"
              "os.kill(os.getpid(), signal.SIGKILL)\n")
    out = tmp_path / "out"
    with out.open("w") as f:  # not a pipe: an orphan holding it would keep the run waiting
        parent = subprocess.run([sys.executable, "-c", script], stdout=f, stderr=subprocess.STDOUT, timeout=120)
    assert parent.returncode == -signal.SIGKILL, out.read_text()
    worker = int(out.read_text().split()[0])
    deadline = time.monotonic() + 15.0
    while _is_running(worker) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not _is_running(worker), f"planner worker {worker} outlived its killed controller"


def _is_running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"  # a zombie has exited
    except FileNotFoundError:
        return False
