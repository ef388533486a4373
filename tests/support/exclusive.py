"""pytest plugin (tests/conftest.py loads it): a test marked `exclusive` runs with no other test beside it, on
any xdist worker nor in another test run on this machine. Its assertions read the machine's speed (a step sized
from the ITL its warm-up measured), which any other test changes under it. Every other test holds a shared lock
while it runs; an exclusive one waits for the holders to finish and holds the lock alone. The lock files are one
pair per machine, in MOECTL_EXCLUSIVE_DIR (default: the temp dir); a test run that a test starts (pytester)
locks apart, in a directory of that test's, or it would wait for the lock its parent holds.

A test that starts a group of rank processes (`RANK_PROCESSES`, support/processes.py) also holds the machine's
rank lock alone: xdist_group keeps one run's groups on one worker, and this lock keeps two runs' groups apart
(two suites side by side on 2 cores each ran one at once, and the load reached 23). It is taken before the
shared lock, so a test waiting for it does not hold up an exclusive test.

The locks are taken around the whole test protocol, outside pytest-timeout's timer: a test's timeout counts its
own setup, call and teardown, not the minutes it waited for an exclusive test on the other worker."""

from __future__ import annotations

import fcntl
import os
import tempfile
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import pytest

from support.processes import RANK_GROUP


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
    where = Path(os.environ.get("MOECTL_EXCLUSIVE_DIR") or tempfile.gettempdir())
    turnstile, room = (where / f"moectl-tests-exclusive.{n}" for n in ("turnstile", "lock"))
    with ExitStack() as held:
        if _is_rank_group(item):
            held.enter_context(_flock(where / "moectl-tests-rank.lock", fcntl.LOCK_EX))
        if item.get_closest_marker("exclusive") is None:
            with _flock(turnstile, fcntl.LOCK_EX):  # a waiting exclusive test holds it: no new test slips in first
                pass
            held.enter_context(_flock(room, fcntl.LOCK_SH))
        else:
            held.enter_context(_flock(turnstile, fcntl.LOCK_EX))
            held.enter_context(_flock(room, fcntl.LOCK_EX))
        nested = held.enter_context(tempfile.TemporaryDirectory(prefix="moectl-exclusive-"))
        held.enter_context(_environ("MOECTL_EXCLUSIVE_DIR", nested))
        yield


def _is_rank_group(item: pytest.Item) -> bool:
    group = item.get_closest_marker("xdist_group")
    return group is not None and group.args[:1] == (RANK_GROUP,)


@contextmanager
def _environ(name: str, value: str) -> Iterator[None]:
    before = os.environ.get(name)
    os.environ[name] = value
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = before
