"""Throwaway real servers from Debian binaries, for tests. Missing binary: skip naming the package,
or fail under CI=true, where `make test` should have installed it."""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from agents.processes import free_port  # noqa: F401  (re-exported: the tests' one free port)


def require_binary(path_glob: str, package: str) -> str:
    found = sorted(glob.glob(path_glob)) or ([shutil.which(path_glob)] if shutil.which(path_glob) else [])
    if found:
        return found[-1]
    message = f"{path_glob} not found: install the Debian package '{package}' (make test does, as root)"
    if os.environ.get("CI") == "true":
        pytest.fail(message)
    pytest.skip(message)


@contextmanager
def postgres() -> Iterator[tuple[str, int]]:
    """Starts a PostgreSQL cluster in a temp dir; yields (socket dir, port). Runs as `postgres`
    when we are root, since the server refuses root. `stop_postgres`/`start_postgres` take it down
    and bring it back (fault tests)."""
    initdb = require_binary("/usr/lib/postgresql/*/bin/initdb", "postgresql")
    workdir = tempfile.mkdtemp(prefix="moectl-pg-")
    if os.geteuid() == 0:
        shutil.chown(workdir, "postgres", "postgres")
    port = free_port()
    try:
        subprocess.run([*_as_postgres(), initdb, "-D", os.path.join(workdir, "data"), "-U", "postgres",
                        "--auth=trust", "-E", "UTF8"], check=True, capture_output=True)
        start_postgres(workdir, port)
        yield workdir, port
    finally:
        _pg_ctl(workdir, "-m", "immediate", "stop", check=False)
        shutil.rmtree(workdir, ignore_errors=True)


def start_postgres(workdir: str, port: int) -> None:
    _pg_ctl(workdir, "-w", "-t", "60", "-l", os.path.join(workdir, "log"), "-o",
            f"-p {port} -k {workdir} -c listen_addresses='' -c fsync=off -c synchronous_commit=off"
            " -c full_page_writes=off", "start")


def stop_postgres(workdir: str) -> None:
    """`pg_ctl stop -m fast`: open connections are terminated, as in a failover or a restart."""
    _pg_ctl(workdir, "-m", "fast", "-w", "stop")


def _pg_ctl(workdir: str, *args: str, check: bool = True) -> None:
    bindir = os.path.dirname(require_binary("/usr/lib/postgresql/*/bin/initdb", "postgresql"))
    subprocess.run([*_as_postgres(), f"{bindir}/pg_ctl", "-D", os.path.join(workdir, "data"), *args],
                   check=check, capture_output=True)


def _as_postgres() -> list[str]:
    return ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []


def postgres_url(socket_dir: str, port: int, database: str = "postgres") -> str:
    return f"postgresql+psycopg://postgres@/{database}?host={socket_dir}&port={port}"


def create_database(socket_dir: str, port: int, name: str) -> str:
    import psycopg

    with psycopg.connect(host=socket_dir, port=port, user="postgres", dbname="postgres", autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    return postgres_url(socket_dir, port, name)


def until(what: str, check, timeout: float, interval: float = 0.5):
    """Calls `check` until it returns something truthy, and returns that; fails naming `what` after `timeout` s."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out waiting for {what}")


def wait_http(url: str, timeout: float = 30.0) -> None:
    import httpx

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if httpx.get(url, timeout=2).status_code < 500:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise TimeoutError(f"{url} did not answer within {timeout:.0f}s")
