"""pytest plugin (tests/conftest.py loads it): a test marked `exclusive` runs with no other test beside it, on
any xdist worker. Its assertions read the machine's speed (a step sized from the ITL its warm-up measured), which
another worker's test changes under it. Every other test holds a shared lock while it runs; an exclusive one
waits for the holders to finish and holds the lock alone. The lock files sit beside the workers' temp dirs, one
pair per run."""

from __future__ import annotations

import fcntl
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest


@contextmanager
def _flock(path: Path, operation: int) -> Iterator[None]:
    with open(path, "a") as handle:
        fcntl.flock(handle, operation)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


@pytest.fixture(autouse=True)
def exclusive_or_shared(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    run_dir = tmp_path_factory.getbasetemp().parent  # under xdist the workers' temp dirs share it
    turnstile, room = run_dir / "exclusive.turnstile", run_dir / "exclusive.lock"
    if request.node.get_closest_marker("exclusive") is None:
        with _flock(turnstile, fcntl.LOCK_EX):  # a waiting exclusive test holds it: no new test slips in first
            pass
        with _flock(room, fcntl.LOCK_SH):
            yield
        return
    with _flock(turnstile, fcntl.LOCK_EX), _flock(room, fcntl.LOCK_EX):
        yield
