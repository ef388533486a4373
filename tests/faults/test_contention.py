"""Another process holds SQLite's write lock for 40 s while 24 agents post: health answers at once (it never
waits for the database), snapshot posts are told 503 + Retry-After before the agents' own 5 s timeout
(nobody holds a connection for the old 30 s busy timeout), nothing answers 500, and all recovers after.
With more callers than worker threads, those that queued past the timeout are refused before they start.
The controller runs as its own process (`moectl serve`), as in production: the callers' threads here do not
share its interpreter lock."""

from __future__ import annotations

import sqlite3
import threading
import time
from dataclasses import dataclass, field

import httpx
import pytest
from support.auth import agent
from support.controllers import replica
from support.live import at_once, live_fleet
from support.servers import until

from controlplane.config import Settings

LOCK_SECONDS = 40.0
AGENT_TIMEOUT = 5.0  # agents/telemetry/poster.py: the SnapshotPoster default
NUM_POSTERS = 24  # more than the 15 connections the request pool had (500 "QueuePool limit reached")
# a health answer that waited for the database would wait its timeout at least: what "at once" is told from
# (a latency bound under it would time this machine's scheduler, not the controller)
DB_TIMEOUT = Settings().db_timeout_seconds


@dataclass
class Answers:
    """(started, seconds, status, Retry-After) per request; -1: timed out."""

    rows: list[tuple[float, float, int, str | None]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def call(self, http: httpx.Client, method: str, path: str, **kwargs) -> None:
        started = time.monotonic()
        try:
            response = http.request(method, path, **kwargs)
            row = (started, time.monotonic() - started, response.status_code, response.headers.get("Retry-After"))
        except httpx.TimeoutException:
            row = (started, time.monotonic() - started, -1, None)
        with self.lock:
            self.rows.append(row)

    def between(self, start: float, end: float) -> list[tuple[float, float, int, str | None]]:
        return [r for r in self.rows if start <= r[0] < end]


@pytest.mark.slow
def test_a_40s_sqlite_write_lock_gets_fast_503s_and_health_stays_fast(tmp_path):
    path = tmp_path / "c.db"
    posts, health = Answers(), Answers()
    with replica("contention", {"MOECTL_DATABASE_URL": f"sqlite:///{path}"}, tmp_path) as controller:
        [instance] = live_fleet(controller.url, {"mode": "observe"}, num_windows=1, window_seconds=1.0)
        bodies = [s.model_dump_json() for s in instance.window(time.time() - 1.0, 1.0, 4096)]
        stop = threading.Event()

        def post(rank: int) -> None:
            with httpx.Client(base_url=controller.url, timeout=AGENT_TIMEOUT) as http:
                while not stop.is_set():
                    posts.call(http, "POST", "/v1/agents/snapshot", content=bodies[rank % len(bodies)],
                               headers=agent() | {"Content-Type": "application/json"})
                    stop.wait(0.2)

        def probe() -> None:
            with httpx.Client(base_url=controller.url, timeout=AGENT_TIMEOUT) as http:
                while not stop.is_set():
                    health.call(http, "GET", "/healthz")
                    stop.wait(0.25)

        threads = [threading.Thread(target=post, args=(r,)) for r in range(NUM_POSTERS)]
        threads.append(threading.Thread(target=probe))
        for thread in threads:
            thread.start()
        try:
            time.sleep(2.0)
            locker = sqlite3.connect(path, isolation_level=None)
            locker.execute("BEGIN IMMEDIATE")  # the write lock, held as a stuck writer would
            locked_at = time.monotonic()
            time.sleep(LOCK_SECONDS)
            locker.execute("ROLLBACK")
            released_at = time.monotonic()
            locker.close()
            until("every agent's post to succeed again",
                  lambda: {r[2] for r in posts.between(time.monotonic() - 1.0, time.monotonic())} == {200}, timeout=20)
            recovered_at = time.monotonic()
        finally:
            stop.set()
            for thread in threads:
                thread.join(timeout=30)
    # from a second in (the posts in flight have landed) to one agent timeout before the release (later ones may
    # get the lock as it is released)
    locked = posts.between(locked_at + 1.0, released_at - AGENT_TIMEOUT)
    statuses = {s for _, _, s, _ in posts.rows}
    summary = {"posts": len(posts.rows), "statuses": {s: [r[2] for r in posts.rows].count(s) for s in statuses},
               "slowest post": round(max(r[1] for r in posts.rows), 2),
               "slowest healthz": round(max(r[1] for r in health.rows), 2)}
    assert 500 not in statuses and -1 not in statuses, summary
    assert locked and all(r[2] == 503 and r[3] for r in locked), summary
    assert max(r[1] for r in locked) < AGENT_TIMEOUT, summary
    assert all(r[2] == 200 for r in health.rows) and max(r[1] for r in health.rows) < DB_TIMEOUT, summary
    summary["recovered after release"] = round(recovered_at - released_at, 2)
    assert recovered_at - released_at < 10, summary
    print(summary)


@pytest.mark.slow
def test_more_callers_than_workers_are_refused_unstarted_not_queued_past_their_timeout(tmp_path):
    path, num_callers = tmp_path / "c.db", 80  # twice the API's worker threads
    with replica("overload", {"MOECTL_DATABASE_URL": f"sqlite:///{path}"}, tmp_path) as controller:
        [instance] = live_fleet(controller.url, {"mode": "observe"}, num_windows=1, window_seconds=1.0)
        body = instance.window(time.time() - 1.0, 1.0, 4096)[0].model_dump_json()
        locker = sqlite3.connect(path, isolation_level=None)
        locker.execute("BEGIN IMMEDIATE")
        try:
            with httpx.Client(base_url=controller.url, timeout=AGENT_TIMEOUT,
                              limits=httpx.Limits(max_connections=num_callers)) as http:

                def post(_: int) -> tuple[float, int, str, str | None]:
                    started = time.monotonic()
                    response = http.post("/v1/agents/snapshot", content=body,
                                         headers=agent() | {"Content-Type": "application/json"})
                    return (time.monotonic() - started, response.status_code, response.json()["detail"],
                            response.headers.get("Retry-After"))

                answers = at_once(post, num_callers, num_threads=num_callers)
        finally:
            locker.execute("ROLLBACK")
            locker.close()
    unstarted = [a for a in answers if "overloaded" in a[2]]
    summary = {"refused unstarted": len(unstarted), "slowest": round(max(a[0] for a in answers), 2)}
    print(summary)
    assert {a[1] for a in answers} == {503} and all(a[3] for a in answers), answers
    assert unstarted and max(a[0] for a in answers) < AGENT_TIMEOUT, summary
