"""Throwaway real servers from Debian binaries, for tests. Missing binary: skip naming the package,
or fail under CI=true, where `make test` should have installed it."""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest


def require_binary(path_glob: str, package: str) -> str:
    found = sorted(glob.glob(path_glob)) or ([shutil.which(path_glob)] if shutil.which(path_glob) else [])
    if found:
        return found[-1]
    message = f"{path_glob} not found: install the Debian package '{package}' (make test does, as root)"
    if os.environ.get("CI") == "true":
        pytest.fail(message)
    pytest.skip(message)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def postgres() -> Iterator[tuple[str, int]]:
    """Starts a PostgreSQL cluster in a temp dir; yields (socket dir, port). Runs as `postgres`
    when we are root, since the server refuses root."""
    initdb = require_binary("/usr/lib/postgresql/*/bin/initdb", "postgresql")
    bindir = os.path.dirname(initdb)
    workdir = tempfile.mkdtemp(prefix="moectl-pg-")
    as_user: list[str] = []
    if os.geteuid() == 0:
        shutil.chown(workdir, "postgres", "postgres")
        as_user = ["runuser", "-u", "postgres", "--"]
    data, port = os.path.join(workdir, "data"), free_port()
    try:
        subprocess.run([*as_user, initdb, "-D", data, "-U", "postgres", "--auth=trust", "-E", "UTF8"],
                       check=True, capture_output=True)
        subprocess.run([*as_user, f"{bindir}/pg_ctl", "-D", data, "-w", "-t", "60", "-l",
                        os.path.join(workdir, "log"), "-o", f"-p {port} -k {workdir} -c listen_addresses=''"
                        " -c fsync=off -c synchronous_commit=off -c full_page_writes=off", "start"],
                       check=True, capture_output=True)
        yield workdir, port
    finally:
        subprocess.run([*as_user, f"{bindir}/pg_ctl", "-D", data, "-m", "immediate", "stop"], capture_output=True)
        shutil.rmtree(workdir, ignore_errors=True)


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
