"""Planning in a worker process (controlplane/compute.py): the same answer as in the calling thread, from
another process; a worker that dies fails its call and the next call gets a new one; `start` has the worker
up before the first plan."""

from __future__ import annotations

import multiprocessing
import os
import signal
from concurrent.futures.process import BrokenProcessPool

import pytest

from controlplane.compute import WorkerProcess, in_process


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
