"""Where the loop runs its pure, CPU-heavy planning: in the calling thread, or in a worker process.

The controller serves the API and runs the reconcile loop in one process. Planning a DeepSeek-sized pool
(58 layers x 320 slots) takes seconds of NumPy and Python; in the API's process it holds the interpreter lock
that long and every agent's post waits behind it. `WorkerProcess` runs the planner in a process of its own,
so ingest keeps its latency while a plan is solved; benchmarks/scale.py runs the controller this way.
Only pure functions go there: arrays and dataclasses in, dataclasses out.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from multiprocessing import get_context
from typing import Any, Protocol, TypeVar

T = TypeVar("T")


class Compute(Protocol):
    def __call__(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
        """fn(*args, **kwargs), wherever this compute runs it."""
        ...


def in_process(fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
    return fn(*args, **kwargs)


class WorkerProcess:
    """One worker process, started on first use; `spawn`, because the controller runs threads that a fork
    would copy in whatever state they were. A worker that died (killed, out of memory) fails the call it
    was running, and the next call starts a new one. The worker leaves with the controller, however that
    ends, and leaves Ctrl-C to it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pool: ProcessPoolExecutor | None = None

    def start(self, *fns: Callable[..., Any]) -> None:
        """Starts the worker now and imports `fns`' modules there, without waiting: a worker started by the
        loop's first plan makes that pass seconds late (imports under load), judging later windows than it could."""
        pool = self._started()
        for fn in fns:
            pool.submit(_is_loaded, fn)

    def _started(self) -> ProcessPoolExecutor:
        with self._lock:
            if self._pool is None:
                self._pool = ProcessPoolExecutor(max_workers=1, mp_context=get_context("spawn"),
                                                 initializer=_serve_parent, initargs=(os.getpid(),))
            return self._pool

    def __call__(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
        pool = self._started()
        try:
            return pool.submit(fn, *args, **kwargs).result()
        except BrokenProcessPool:
            with self._lock:
                if self._pool is pool:
                    self._pool = None
            raise

    def close(self) -> None:
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)


def _is_loaded(fn: Callable[..., Any]) -> bool:
    """Runs in the worker: unpickling `fn` imported its module there."""
    return callable(fn)


def _serve_parent(parent_pid: int) -> None:
    """Runs first in the worker. A worker blocks on its call queue, whose writing end it holds itself, so it
    would outlive a controller killed outright (an orphan with its resource tracker): it watches its parent
    and exits when the parent is gone. Ctrl-C reaches the terminal's whole process group; the controller
    stops the worker itself, without the worker's KeyboardInterrupt traceback."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)

    def watch() -> None:
        while os.getppid() == parent_pid:
            time.sleep(1.0)
        os._exit(0)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()
