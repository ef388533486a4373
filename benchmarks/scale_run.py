"""One configuration of the scale benchmark (benchmarks/scale.py): a controller (benchmarks/scale_controller.py)
in a subprocess on one tree's code and one database, driven by the fleet for real-time windows and then a
fast-forwarded hour; what it measured (`Run`)."""

from __future__ import annotations

import contextlib
import http.client
import io
import json
import os
import pathlib
import random
import struct
import subprocess
import sys
import tarfile
import time
from dataclasses import dataclass, field

import numpy as np

from agents.protocol.grid import post_at
from benchmarks.scale_fleet import WINDOW_SECONDS, Fleet
from benchmarks.scale_load import AGENT_TOKEN, Poster, WindowResult

REPO = pathlib.Path(__file__).resolve().parents[1]
TESTS_DIR = REPO / "tests"
ADMIN_TOKEN = "bench-admin"


class Controller:
    """benchmarks/scale_controller.py in subprocesses, on `tree`'s code: one serving the API and running the
    reconcile loop, and `api_processes - 1` more serving the API only, all on one port (the kernel spreads the
    connections over them), as replicas of a controller behind one Service do."""

    def __init__(self, tree: pathlib.Path, database_url: str, workdir: pathlib.Path, *, api_processes: int = 1):
        sys.path.insert(0, str(TESTS_DIR))
        from support.servers import free_port, wait_http

        self.port, self.workdir = free_port(), workdir
        self.clock_file = workdir / "clock"
        self.clock_file.write_bytes(struct.pack("d", 0.0))
        # rewritten in place: truncating a file the controller has mapped kills it with SIGBUS
        self.clock_fd = os.open(self.clock_file, os.O_RDWR)
        self.passes_file = workdir / "passes.jsonl"
        self.gc_file = workdir / "gc.jsonl"
        self.log = open(workdir / "controller.log", "w")  # noqa: SIM115
        env = os.environ | {"PYTHONPATH": str(tree), "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
        command = [sys.executable, str(REPO / "benchmarks" / "scale_controller.py"), "--database-url", database_url,
                   "--port", str(self.port), "--clock-file", str(self.clock_file), "--passes-file",
                   str(self.passes_file), "--window-seconds", str(WINDOW_SECONDS), "--api-token", ADMIN_TOKEN,
                   "--agent-token", AGENT_TOKEN, "--gc-file", str(self.gc_file)]
        self.process = subprocess.Popen(command, cwd=tree, env=env, stdout=self.log, stderr=subprocess.STDOUT)
        wait_http(f"http://127.0.0.1:{self.port}/healthz", timeout=120)  # it migrated the database
        self.api_only = [subprocess.Popen(command + ["--api-only"], cwd=tree, env=env, stdout=self.log,
                                          stderr=subprocess.STDOUT) for _ in range(api_processes - 1)]
        time.sleep(5.0 if self.api_only else 0.0)  # until they listen too (a request may reach any of them)
        self.offset = 0.0

    def now(self) -> float:
        return time.time() + self.offset

    def advance(self, seconds: float) -> None:
        self.offset += seconds
        os.pwrite(self.clock_fd, struct.pack("d", self.offset), 0)

    def rss_mb(self) -> float:
        """The API processes' resident memory together (the planner's worker left out)."""
        return sum(_rss_mb(process.pid) for process in [self.process, *self.api_only])

    def passes(self) -> list[dict]:
        if not self.passes_file.exists():
            return []
        return [json.loads(line) for line in self.passes_file.read_text().splitlines() if line.strip()]

    def gc_pauses(self, since: float) -> list[dict]:
        """The API processes' collections over 5 ms since `since` (unix seconds), each {"generation", "ms"}."""
        if not self.gc_file.exists():
            return []
        pauses = [json.loads(line) for line in self.gc_file.read_text().splitlines() if line.strip()]
        return [p for p in pauses if p["at"] >= since]

    def get(self, path: str) -> dict:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        conn.request("GET", path, headers={"Authorization": f"Bearer {ADMIN_TOKEN}"})
        response = conn.getresponse()
        return json.loads(response.read())

    def put(self, path: str, body: dict) -> int:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        conn.request("PUT", path, body=json.dumps(body),
                     headers={"Authorization": f"Bearer {ADMIN_TOKEN}", "Content-Type": "application/json"})
        response = conn.getresponse()
        response.read()
        return response.status

    def stop(self) -> None:
        for process in [*self.api_only, self.process]:
            process.terminate()
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        self.log.close()
        os.close(self.clock_fd)


def _rss_mb(pid: int) -> float:
    for line in pathlib.Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def export_tree(ref: str, into: pathlib.Path) -> pathlib.Path:
    """The code of git `ref` (controlplane, agents, migrations, dashboards), for today's controller."""
    archive = subprocess.run(["git", "-C", str(REPO), "archive", ref, "controlplane", "agents", "migrations",
                              "dashboards"], check=True, capture_output=True).stdout
    into.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(into, filter="data")
    return into


def database_size_mb(url: str) -> float:
    if url.startswith("sqlite"):
        path = pathlib.Path(url.removeprefix("sqlite:///"))
        return sum(p.stat().st_size for p in path.parent.glob(path.name + "*")) / 2**20
    import psycopg

    with psycopg.connect(url.replace("postgresql+psycopg", "postgresql")) as conn:
        return conn.execute("SELECT pg_database_size(current_database())").fetchone()[0] / 2**20


def largest_tables_mb(url: str, limit: int = 4) -> dict[str, float]:
    """The largest tables with their indexes (and, on PostgreSQL, their TOAST), MB; on SQLite from its dbstat
    table where the library has it (else empty)."""
    if url.startswith("sqlite"):
        import sqlite3

        with contextlib.closing(sqlite3.connect(url.removeprefix("sqlite:///"))) as conn:
            try:
                rows = conn.execute("SELECT coalesce(m.tbl_name, d.name), sum(d.pgsize) FROM dbstat d LEFT JOIN "
                                    "sqlite_master m ON m.name = d.name GROUP BY 1 ORDER BY 2 DESC LIMIT ?",
                                    (limit,)).fetchall()
            except sqlite3.OperationalError:  # built without dbstat
                return {}
    else:
        import psycopg

        with psycopg.connect(url.replace("postgresql+psycopg", "postgresql")) as conn:
            rows = conn.execute("SELECT relname, pg_total_relation_size(relid) FROM pg_stat_user_tables "
                                "ORDER BY 2 DESC LIMIT %s", (limit,)).fetchall()
    return {name: size / 2**20 for name, size in rows}


@dataclass
class Run:
    code: str
    database: str
    num_gpus: int
    protocol: str
    windows: list[WindowResult]
    pass_seconds: list[float]
    num_agents: int
    num_fresh: int
    rss_mb: float
    database_mb: float
    hour_windows: int = 0
    hour_seconds: float = 0.0
    hour_rss_mb: float | None = None
    hour_database_mb: float | None = None
    hour_pass_seconds: list[float] = field(default_factory=list)
    hour_results: list[WindowResult] = field(default_factory=list)  # the hour's windows, posted back to back
    hour_samples: list[tuple[int, float, float]] = field(default_factory=list)  # (windows posted, RSS MB, db MB)
    hour_tables_mb: dict[str, float] = field(default_factory=dict)  # the largest tables at the end of the hour
    controller_exit: int | None = None  # the controller's exit status where it died during the run
    load_average: tuple[float, float] = (0.0, 0.0)
    api_processes: int = 1  # the machine's (1 min) when the run started, when it ended
    gc_pauses: list[dict] = field(default_factory=list)  # collections over 5 ms during the measured windows
    posts: str = "at once"  # or "spread": as agents' posters send them

    def ingest(self) -> np.ndarray:
        return np.array([w.seconds for w in self.windows[1:]])  # the first window creates the pools and agents

    def num_refused(self) -> int:
        """Posts of the measured windows not answered 200 (a controller far enough behind refuses stale windows)."""
        return sum(n for w in self.windows[1:] for status, n in w.statuses.items() if status != 200)

    def p99_ms(self) -> float:
        return 1e3 * float(np.quantile(np.concatenate([w.latencies for w in self.windows[1:]]), 0.99))

    def hour_ingest(self) -> np.ndarray:
        return np.array([w.seconds for w in self.hour_results])

    def hour_p99_ms(self) -> float:
        return 1e3 * float(np.quantile(np.concatenate([w.latencies for w in self.hour_results]), 0.99))


def run_one(code: str, tree: pathlib.Path, database: str, database_url: str, num_gpus: int, protocol: str, *,
            num_windows: int, hour_windows: int, connections: int, workdir: pathlib.Path,
            api_processes: int = 1, spread: bool = False) -> Run:
    """spread: each window's posts sent as the agents' posters send them, spread over the next window's first
    tenth (agents/protocol/grid.py); else all at once, at the window's end."""
    load_at_start = os.getloadavg()[0]
    rng = random.Random(0)
    fleet = Fleet(num_gpus, protocol)
    controller = Controller(tree, database_url, workdir, api_processes=api_processes)
    poster = Poster(controller.port, connections)
    try:
        deployment = fleet.instances[0].deployment
        status = controller.put(f"/v1/deployments/{deployment}", {
            "model": fleet.instances[0].model.model_dump(), "policy": {"mode": "auto", "cooldown_seconds": 60}})
        assert status in (200, 201), status
        index = int(controller.now() // WINDOW_SECONDS)
        results, measured_from = [], float("inf")
        for k in range(num_windows):
            if k == 1:
                measured_from = time.time()  # as ingest and p99: the first window creates the pools and agents
            end = (index + 1) * WINDOW_SECONDS
            time.sleep(max(0.0, end - controller.now()))
            bodies = fleet.render(index * WINDOW_SECONDS)
            result = poster.post_window(fleet.path, bodies, [post_at(0.0, WINDOW_SECONDS, rng.random())
                                                             for _ in bodies] if spread else None)
            results.append(result)
            switched = fleet.apply(result.answers)
            print(f"  {code} {database} {num_gpus} GPUs {protocol}: window {index}: {result.seconds:.2f}s, "
                  f"p99 {1e3 * np.quantile(result.latencies, 0.99):.0f}ms {result.statuses}"
                  + (f", {switched} instances switched placement" if switched else ""), flush=True)
            index += 1
        time.sleep(max(0.0, (index + 0.6) * WINDOW_SECONDS - controller.now()))
        overview = controller.get(f"/v1/deployments/{deployment}/overview")
        run = Run(code, database, num_gpus, protocol, results, [p["seconds"] for p in controller.passes()],
                  overview["agents"]["total"], overview["agents"]["fresh"], controller.rss_mb(),
                  database_size_mb(database_url), gc_pauses=controller.gc_pauses(measured_from))
        if hour_windows:
            num_passes = len(controller.passes())
            started = time.perf_counter()
            for i in range(hour_windows):
                # the controller's clock moves to the end of the window, the window is posted, and the clock
                # moves on: an hour of windows in as long as the controller takes to ingest them
                controller.advance(end + WINDOW_SECONDS * 0.05 - controller.now())
                result = poster.post_window(fleet.path, fleet.render(index * WINDOW_SECONDS))
                run.hour_results.append(result)
                fleet.apply(result.answers)
                index += 1
                end = (index + 1) * WINDOW_SECONDS
                if (i + 1) % 60 == 0:
                    run.hour_samples.append((i + 1, controller.rss_mb(), database_size_mb(database_url)))
                    print(f"  hour: {i + 1}/{hour_windows} windows, rss {run.hour_samples[-1][1]:.0f} MB, "
                          f"db {run.hour_samples[-1][2]:.1f} MB", flush=True)
            controller.advance(end + WINDOW_SECONDS * 0.6 - controller.now())
            time.sleep(2 * WINDOW_SECONDS)  # a pass or two on the last windows
            run.hour_windows, run.hour_seconds = hour_windows, time.perf_counter() - started
            run.hour_rss_mb, run.hour_database_mb = controller.rss_mb(), database_size_mb(database_url)
            run.hour_pass_seconds = [p["seconds"] for p in controller.passes()[num_passes:]]
            run.hour_tables_mb = largest_tables_mb(database_url)
        run.controller_exit = controller.process.poll()
        run.load_average = (load_at_start, os.getloadavg()[0])
        run.api_processes, run.posts = api_processes, "spread" if spread else "at once"
        return run
    finally:
        poster.close()
        controller.stop()
