"""`moectl up` used to delete its database at every start and ignore MOECTL_DATABASE_URL, and `moectl token
create` wrote to another database than the running `up`. Now every command reaches one database by default
(.moectl/moectl.db in the working directory, or MOECTL_DATABASE_URL), `up` keeps it across runs and
`--fresh` clears it. Real processes: `moectl up --sim` started, stopped and started again."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
from support.processes import RANK_PROCESSES, die_with_parent
from support.servers import free_port, until

from controlplane.config import DEFAULT_DATABASE_URL

pytestmark = RANK_PROCESSES

POLICY = {"mode": "observe", "cooldown_seconds": 123.0}


def environment(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MOECTL_")}
    return env | {"PYTHONUNBUFFERED": "1"} | extra


@contextmanager
def moectl_up(cwd: Path, *args: str, env: dict[str, str]) -> Iterator[tuple[httpx.Client, dict[str, str]]]:
    """`moectl up --sim` in `cwd`; yields a client to it (with its admin token) and its printed lines."""
    port = free_port()
    process = subprocess.Popen([sys.executable, "-m", "controlplane", "up", "--sim", "--port", str(port),
                                "--window-seconds", "1", "--deployments", "1", "--ep-size", "4", *args],
                               cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               preexec_fn=die_with_parent)
    printed: dict[str, str] = {}
    try:
        while "api token" not in printed:
            line = process.stdout.readline()
            assert line, f"moectl up exited early: {printed}"
            if ": " in line:
                key, value = line.split(": ", 1)
                printed[key] = value.strip()
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=10,
                          headers={"Authorization": f"Bearer {printed['api token']}"}) as client:
            until("the simulated deployment", lambda: client.get("/v1/deployments/sim-0/overview").status_code == 200,
                  timeout=60)
            yield client, printed
    finally:
        process.send_signal(signal.SIGINT)
        output, _ = process.communicate(timeout=60)
    assert process.returncode == 0, output


def token_create(cwd: Path, name: str, env: dict[str, str]) -> str:
    done = subprocess.run([sys.executable, "-m", "controlplane", "token", "create", "--name", name, "--role",
                           "operator"], cwd=cwd, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout.strip().splitlines()[-1]


def whoami(client: httpx.Client, secret: str) -> int:
    return client.get("/v1/whoami", headers={"Authorization": f"Bearer {secret}"}).status_code


@pytest.mark.slow
def test_up_keeps_its_database_and_token_create_reaches_it(tmp_path):
    env = environment()
    with moectl_up(tmp_path, env=env) as (client, printed):
        assert printed["database"].startswith(DEFAULT_DATABASE_URL)
        assert client.put("/v1/deployments/sim-0/policy", json=POLICY).status_code == 200
        secret = token_create(tmp_path, "alice", env)  # while `up` runs, from the same directory
        assert whoami(client, secret) == 200
        policy_version = client.get("/v1/deployments/sim-0/policy").json()["version"]
    assert (tmp_path / ".moectl" / "moectl.db").is_file()

    with moectl_up(tmp_path, env=env) as (client, _):  # a restart carries on
        assert client.get("/v1/deployments/sim-0/policy").json()["version"] == policy_version
        assert client.get("/v1/deployments/sim-0/policy").json()["policy"]["cooldown_seconds"] == 123.0
        assert whoami(client, secret) == 200

    with moectl_up(tmp_path, "--fresh", env=env) as (client, printed):
        assert "cleared" in printed["database"]
        assert client.get("/v1/deployments/sim-0/policy").json()["version"] == 1  # registered anew by the sim
        assert whoami(client, secret) == 401


@pytest.mark.slow
def test_up_and_token_honour_moectl_database_url(tmp_path):
    elsewhere = tmp_path / "elsewhere" / "state.db"
    env = environment(MOECTL_DATABASE_URL=f"sqlite:///{elsewhere}")
    secret = token_create(tmp_path, "bob", env)
    with moectl_up(tmp_path, env=env) as (client, printed):
        assert printed["database"] == f"sqlite:///{elsewhere} (kept across runs; --fresh clears it)"
        assert whoami(client, secret) == 200
    assert elsewhere.is_file() and not (tmp_path / ".moectl").exists()
