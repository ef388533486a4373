"""Real controller replicas (`python -m controlplane serve`) sharing one database, for leader-election tests:
started, killed (-9), paused (SIGSTOP) and resumed (SIGCONT) by the test, and their actions read back."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
from sqlalchemy import create_engine, select

from controlplane.store.tables import Action, Leader
from controlplane.store.timestamps import seconds
from support.auth import AGENT_TOKEN, API_TOKEN, agent, operator
from support.processes import die_with_parent, stop
from support.servers import free_port, wait_http
from support.store import MODEL, snapshot

# short enough that a takeover is seconds; the retry period bounds how late it is noticed
LEASE_SECONDS, RENEW_SECONDS, RETRY_SECONDS = 3.0, 2.0, 0.5


@dataclass
class Replica:
    identity: str
    url: str
    process: subprocess.Popen
    log: Path

    def ask_size(self, replicas: int) -> dict:
        answer = httpx.post(f"{self.url}/v1/deployments/tiny/pools/decode/size", json={"replicas": replicas},
                            headers=operator(), timeout=30)
        assert answer.status_code == 200, f"{self.identity}: {answer.status_code} {answer.text}"
        return answer.json()

    def is_leading(self) -> bool:
        metrics = httpx.get(f"{self.url}/metrics", timeout=10).text
        return "moectl_controller_leader 1.0" in metrics

    def pause(self) -> None:
        self.process.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        self.process.send_signal(signal.SIGCONT)

    def kill(self) -> None:
        self.process.kill()
        self.process.wait()


@contextmanager
def replica(identity: str, env: dict[str, str], workdir: Path) -> Iterator[Replica]:
    """One controller replica (API and loop) with `env` over the test's settings; gone on exit."""
    port = free_port()
    log = workdir / f"{identity}.log"
    settings = {"MOECTL_PORT": str(port), "MOECTL_API_TOKEN": API_TOKEN, "MOECTL_AGENT_TOKEN": AGENT_TOKEN,
                "MOECTL_LEADER_IDENTITY": identity, "MOECTL_WINDOW_SECONDS": "1", "MOECTL_RECONCILE_SECONDS": "0.3",
                "MOECTL_LEADER_LEASE_SECONDS": str(LEASE_SECONDS), "MOECTL_LEADER_RENEW_SECONDS": str(RENEW_SECONDS),
                "MOECTL_LEADER_RETRY_SECONDS": str(RETRY_SECONDS)}
    with open(log, "wb") as out:
        process = subprocess.Popen([sys.executable, "-m", "controlplane", "serve"], env=os.environ | settings | env,
                                   stdout=out, stderr=subprocess.STDOUT, preexec_fn=die_with_parent)
    try:
        wait_http(f"http://127.0.0.1:{port}/healthz", timeout=60)
        yield Replica(identity, f"http://127.0.0.1:{port}", process, log)
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGCONT)  # a paused replica would not hear SIGTERM
        stop(process, timeout=20)


def register(url: str, policy: dict) -> None:
    """Deployment 'tiny' with the policy, and its decode pool (an agent's first snapshot makes it)."""
    assert httpx.put(f"{url}/v1/deployments/tiny", json={"model": MODEL.model_dump(), "policy": policy},
                     headers=operator(), timeout=30).status_code == 200
    posted = httpx.post(f"{url}/v1/agents/snapshot", content=snapshot(window_start=time.time() - 15).model_dump_json(),
                        headers=agent() | {"Content-Type": "application/json"}, timeout=30)
    assert posted.status_code == 200, posted.text


@dataclass(frozen=True)
class Written:
    """A pool-size action as the database keeps it: what size, which leader wrote it, and when."""

    id: int
    status: str
    replicas: int | None
    leader: str | None
    created_at: float


def written(database_url: str) -> list[Written]:
    engine = create_engine(database_url)
    try:
        with engine.connect() as conn:
            rows = conn.execute(select(Action).where(Action.kind == "pool_size").order_by(Action.id)).all()
    finally:
        engine.dispose()
    return [Written(r.id, r.status, r.predicted.get("replicas_after"), r.leader, seconds(r.created_at))
            for r in rows]


def leader(database_url: str) -> str | None:
    """The holder of the database election, when it is held there."""
    engine = create_engine(database_url)
    try:
        with engine.connect() as conn:
            return conn.scalar(select(Leader.holder).where(Leader.name == "moectl"))
    finally:
        engine.dispose()
