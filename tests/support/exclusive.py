"""pytest plugin (tests/conftest.py loads it): a test marked `exclusive` runs with no other test beside it, on
any xdist worker. Its assertions read the machine's speed (a step sized from the ITL its warm-up measured), which
another worker's test changes under it. Every other test holds a shared lock while it runs; an exclusive one
waits for the holders to finish and holds the lock alone. The lock files are one pair per run.

The locks are taken around the whole test protocol, outside pytest-timeout's timer: a test's timeout counts its
own setup, call and teardown, not the minutes it waited for an exclusive test on the other worker."""

from __future__ import annotations

import fcntl
import tempfile
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
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


@pytest.hookimpl(hookwrapper=True, tryfirst=True)  # outermost: before pytest-timeout starts its timer
def pytest_runtest_protocol(item: pytest.Item) -> Iterator[None]:
    run = getattr(item.config, "workerinput", {}).get("testrunuid")
    if run is None:  # not under xdist: nothing runs beside it
        yield
        return
    turnstile, room = (Path(tempfile.gettempdir()) / f"moectl-exclusive-{run}.{n}" for n in ("turnstile", "lock"))
    with ExitStack() as held:
        if item.get_closest_marker("exclusive") is None:
            with _flock(turnstile, fcntl.LOCK_EX):  # a waiting exclusive test holds it: no new test slips in first
                pass
            held.enter_context(_flock(room, fcntl.LOCK_SH))
        else:
            held.enter_context(_flock(turnstile, fcntl.LOCK_EX))
            held.enter_context(_flock(room, fcntl.LOCK_EX))
        yield
