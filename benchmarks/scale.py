"""One controller for a DeepSeek-sized fleet: ingest, reconcile, memory and disk, with the load generator in the
same run, today's code side by side with this tree's.

The fleet is DeepSeek-V3-shaped (58 MoE layers x 256 experts, 8 groups, top-8, topk_group 4): 320 GPUs are one
decode instance (EP320, one slot per GPU: 256 experts and 64 redundant); 1,024 GPUs are three decode instances
and two prefill instances (EP32, 9 slots per GPU). Windows are 5 s. Each controller (benchmarks/scale_controller.py:
API and reconcile loop in one process, policy mode `auto`, the fleet applying what it is answered) runs on SQLite and on
PostgreSQL. Per configuration:

- real time: `--windows` windows posted as they end, every rank (v1: a snapshot per rank) or every EP group
  (v2: one group snapshot) at once through `--connections` keep-alive connections. Measured: the time to
  ingest a window (first post sent to last answer), each post's round trip, each reconcile pass (the loop's own
  timing), agents fresh at the end (the overview), the controller's RSS and the database's size.
- an hour (`--hour-windows`, 720 by default; new code only): the clock is moved forward window by window
  (the controller reads its time from a file the benchmark writes), so an hour of windows passes in minutes;
  then RSS and database size again. Today's code ingests a 320-rank window in seconds, so its hour would take
  an hour: it is measured in real time only.

Prints markdown and writes benchmarks/results/scale-<date>.md.

    python -m benchmarks.scale [--ranks 320 1024] [--databases sqlite postgres] [--windows 6] [--baseline-ref REF]
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import http.client
import io
import json
import os
import pathlib
import platform
import queue
import struct
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field

import numpy as np

REPO = pathlib.Path(__file__).resolve().parents[1]
TESTS_DIR = REPO / "tests"
ADMIN_TOKEN, AGENT_TOKEN = "bench-admin", "bench-agent"
WINDOW_SECONDS = 5.0
MARK = 1234567.0  # window_start in the body templates, replaced per window


class Fleet:
    """The simulated DeepSeek-V3 fleet (agents/sim/fleet.py) and one window of its posts per instance, as bytes
    templates split at window_start, rebuilt only when an instance applies a new placement (its slot load
    moves): the load generator spends its CPU on sending, not on building bodies."""

    def __init__(self, num_gpus: int, protocol: str, *, seed: int = 0):
        from agents.sim.fleet import deepseek_fleet

        self.instances, self.protocol = deepseek_fleet(num_gpus, seed=seed), protocol
        self.path = "/v1/agents/snapshot" if protocol == "v1" else "/v2/agents/snapshot"
        self.templates = [self._templates(instance) for instance in self.instances]

    @property
    def num_ranks(self) -> int:
        return sum(i.ep_size for i in self.instances)

    def _templates(self, instance) -> list[tuple[bytes, bytes]]:  # noqa: ANN001
        bodies = [s.model_dump_json() for s in instance.window(MARK, WINDOW_SECONDS)] if self.protocol == "v1" \
            else [instance.group_window(MARK, WINDOW_SECONDS).model_dump_json()]
        return [_template(body) for body in bodies]

    def render(self, window_start: float) -> list[tuple[int, bytes]]:
        """(instance index, body) for every post of the window."""
        value = repr(float(window_start)).encode()
        return [(i, head + value + tail) for i, parts in enumerate(self.templates) for head, tail in parts]

    def apply(self, answers: dict[int, bytes]) -> int:
        """Each instance applies its first answer, as its ranks do; returns how many switched placement."""
        from agents.protocol import DesiredState

        num_switched = 0
        for i, body in answers.items():
            instance, answer = self.instances[i], DesiredState.model_validate_json(body)
            if answer.placement_version != instance.placement_version and answer.slot_to_expert is not None:
                instance.apply(answer)
                self.templates[i] = self._templates(instance)
                num_switched += 1
        return num_switched


def _template(body: str) -> tuple[bytes, bytes]:
    needle = f'"window_start":{MARK!r}'
    head, tail = body.split(needle)
    return (head + '"window_start":').encode(), tail.encode()


@dataclass
class WindowResult:
    seconds: float  # first post sent to last answer
    latencies: list[float]
    statuses: dict[int, int] = field(default_factory=dict)
    answers: dict[int, bytes] = field(default_factory=dict)  # instance -> its first 200 answer


class Poster:
    """`connections` threads, each with a keep-alive connection, posting what `post_window` hands them."""

    def __init__(self, port: int, connections: int):
        self.port, self.jobs = port, queue.Queue()
        self.results: queue.Queue = queue.Queue()
        self.threads = [threading.Thread(target=self._run, daemon=True) for _ in range(connections)]
        for thread in self.threads:
            thread.start()

    def _run(self) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=120)
        headers = {"Authorization": f"Bearer {AGENT_TOKEN}", "Content-Type": "application/json"}
        while True:
            job = self.jobs.get()
            if job is None:
                return
            path, instance, body = job
            started, answer, status = time.perf_counter(), b"", 0
            for _ in range(2):  # uvicorn closes a connection idle for 5 s: the second try opens a new one
                try:
                    conn.request("POST", path, body=body, headers=headers)
                    response = conn.getresponse()
                    answer, status = response.read(), response.status
                    break
                except (OSError, http.client.HTTPException):
                    conn.close()
                    conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=120)
            self.results.put((started, time.perf_counter(), status, instance, answer))

    def post_window(self, path: str, posts: list[tuple[int, bytes]]) -> WindowResult:
        started = time.perf_counter()
        for instance, body in posts:
            self.jobs.put((path, instance, body))
        done = [self.results.get() for _ in posts]
        result = WindowResult(max(d[1] for d in done) - started, [end - begin for begin, end, *_ in done])
        for _, _, status, instance, answer in done:
            result.statuses[status] = result.statuses.get(status, 0) + 1
            if status == 200:
                result.answers.setdefault(instance, answer)
        return result

    def close(self) -> None:
        for _ in self.threads:
            self.jobs.put(None)


class Controller:
    """benchmarks/scale_controller.py in a subprocess, on `tree`'s code."""

    def __init__(self, tree: pathlib.Path, database_url: str, workdir: pathlib.Path):
        sys.path.insert(0, str(TESTS_DIR))
        from support.servers import free_port, wait_http

        self.port, self.workdir = free_port(), workdir
        self.clock_file = workdir / "clock"
        self.clock_file.write_bytes(struct.pack("d", 0.0))
        # rewritten in place: truncating a file the controller has mapped kills it with SIGBUS
        self.clock_fd = os.open(self.clock_file, os.O_RDWR)
        self.passes_file = workdir / "passes.jsonl"
        self.log = open(workdir / "controller.log", "w")  # noqa: SIM115
        env = os.environ | {"PYTHONPATH": str(tree), "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
        self.process = subprocess.Popen(
            [sys.executable, str(REPO / "benchmarks" / "scale_controller.py"), "--database-url", database_url,
             "--port", str(self.port), "--clock-file", str(self.clock_file), "--passes-file", str(self.passes_file),
             "--window-seconds", str(WINDOW_SECONDS), "--api-token", ADMIN_TOKEN,
             "--agent-token", AGENT_TOKEN],
            cwd=tree, env=env, stdout=self.log, stderr=subprocess.STDOUT)
        wait_http(f"http://127.0.0.1:{self.port}/healthz", timeout=120)
        self.offset = 0.0

    def now(self) -> float:
        return time.time() + self.offset

    def advance(self, seconds: float) -> None:
        self.offset += seconds
        os.pwrite(self.clock_fd, struct.pack("d", self.offset), 0)

    def rss_mb(self) -> float:
        for line in pathlib.Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        return float("nan")

    def passes(self) -> list[dict]:
        if not self.passes_file.exists():
            return []
        return [json.loads(line) for line in self.passes_file.read_text().splitlines() if line.strip()]

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
        self.process.terminate()
        try:
            self.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.log.close()
        os.close(self.clock_fd)


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
    controller_exit: int | None = None  # the controller's exit status where it died during the run

    def ingest(self) -> np.ndarray:
        return np.array([w.seconds for w in self.windows[1:]])  # the first window creates the pools and agents

    def num_refused(self) -> int:
        """Posts of the measured windows not answered 200 (a controller far enough behind refuses stale windows)."""
        return sum(n for w in self.windows[1:] for status, n in w.statuses.items() if status != 200)

    def p99_ms(self) -> float:
        return 1e3 * float(np.quantile(np.concatenate([w.latencies for w in self.windows[1:]]), 0.99))


def run_one(code: str, tree: pathlib.Path, database: str, database_url: str, num_gpus: int, protocol: str, *,
            num_windows: int, hour_windows: int, connections: int, workdir: pathlib.Path) -> Run:
    fleet = Fleet(num_gpus, protocol)
    controller = Controller(tree, database_url, workdir)
    poster = Poster(controller.port, connections)
    try:
        deployment = fleet.instances[0].deployment
        status = controller.put(f"/v1/deployments/{deployment}", {
            "model": fleet.instances[0].model.model_dump(), "policy": {"mode": "auto", "cooldown_seconds": 60}})
        assert status in (200, 201), status
        index = int(controller.now() // WINDOW_SECONDS)
        results = []
        for _ in range(num_windows):
            end = (index + 1) * WINDOW_SECONDS
            time.sleep(max(0.0, end - controller.now()))
            result = poster.post_window(fleet.path, fleet.render(index * WINDOW_SECONDS))
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
                  database_size_mb(database_url))
        if hour_windows:
            num_passes = len(controller.passes())
            started = time.perf_counter()
            for i in range(hour_windows):
                # the controller's clock moves to the end of the window, the window is posted, and the clock
                # moves on: an hour of windows in as long as the controller takes to ingest them
                controller.advance(end + WINDOW_SECONDS * 0.05 - controller.now())
                fleet.apply(poster.post_window(fleet.path, fleet.render(index * WINDOW_SECONDS)).answers)
                index += 1
                end = (index + 1) * WINDOW_SECONDS
                if i % 60 == 0:
                    print(f"  hour: {i}/{hour_windows} windows, rss {controller.rss_mb():.0f} MB, "
                          f"db {database_size_mb(database_url):.1f} MB", flush=True)
            controller.advance(end + WINDOW_SECONDS * 0.6 - controller.now())
            time.sleep(2 * WINDOW_SECONDS)  # a pass or two on the last windows
            run.hour_windows, run.hour_seconds = hour_windows, time.perf_counter() - started
            run.hour_rss_mb, run.hour_database_mb = controller.rss_mb(), database_size_mb(database_url)
            run.hour_pass_seconds = [p["seconds"] for p in controller.passes()[num_passes:]]
        run.controller_exit = controller.process.poll()
        return run
    finally:
        poster.close()
        controller.stop()


def table(runs: list[Run]) -> str:
    head = ("| code | database | GPUs | posts/window | ingest s/window (median, max) | ≤ 20% of 5 s | post p99 ms | "
            "posts refused | "
            "reconcile pass s (median, max) | agents fresh | RSS MB | database MB | after 1 h: RSS MB, database MB |")
    lines = [head, "|---" * (head.count("|") - 1) + "|"]
    for r in runs:
        ingest, passes = r.ingest(), np.array(r.pass_seconds or [float("nan")])
        posts = len(r.windows[0].latencies)
        hour = (f"{r.hour_rss_mb:.0f}, {r.hour_database_mb:.1f} ({r.hour_windows} windows in "
                f"{r.hour_seconds / 60:.1f} min, {len(r.hour_pass_seconds)} passes)") \
            if r.hour_rss_mb is not None else "-"
        if r.controller_exit is not None:
            hour += f" CONTROLLER EXITED (status {r.controller_exit})"
        lines.append(f"| {r.code} | {r.database} | {r.num_gpus} | {posts} ({r.protocol}) | "
                     f"{np.median(ingest):.2f}, {ingest.max():.2f} | {'yes' if ingest.max() <= 1.0 else 'no'} | "
                     f"{r.p99_ms():.0f} | {r.num_refused()} | {np.median(passes):.2f}, {passes.max():.2f} | "
                     f"{r.num_fresh}/{r.num_agents} | {r.rss_mb:.0f} | {r.database_mb:.1f} | {hour} |")
    return "\n".join(lines)


def ratios(runs: list[Run]) -> str:
    lines = ["| database | GPUs | ingest today / new | post p99 today / new |", "|---|---|---|---|"]
    by_key = {(r.code, r.database, r.num_gpus): r for r in runs}
    for (code, database, gpus), new in by_key.items():
        today = by_key.get(("today", database, gpus))
        if code != "new" or today is None:
            continue
        lines.append(f"| {database} | {gpus} | {np.median(today.ingest()) / np.median(new.ingest()):.0f}x | "
                     f"{today.p99_ms() / new.p99_ms():.0f}x |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.scale")
    p.add_argument("--ranks", type=int, nargs="+", default=[320, 1024], help="GPUs in the fleet")
    p.add_argument("--databases", nargs="+", default=["sqlite", "postgres"], choices=["sqlite", "postgres"])
    p.add_argument("--codes", nargs="+", default=["today", "new"], choices=["today", "new"])
    p.add_argument("--protocols", nargs="+", default=["v2"], choices=["v1", "v2"],
                   help="what the new code is driven with (today's code speaks v1 only)")
    p.add_argument("--windows", type=int, default=6, help="real-time windows per configuration")
    p.add_argument("--hour-windows", type=int, default=720, help="windows of the fast-forwarded hour (0: none)")
    p.add_argument("--connections", type=int, default=32)
    p.add_argument("--baseline-ref", default="", help="today's code (default: the merge base with main)")
    p.add_argument("--no-write", action="store_true")
    args = p.parse_args(argv)
    sys.path.insert(0, str(TESTS_DIR))
    from support import servers

    ref = args.baseline_ref or subprocess.run(["git", "-C", str(REPO), "merge-base", "HEAD", "main"], check=True,
                                              capture_output=True, text=True).stdout.strip()
    runs = []
    with tempfile.TemporaryDirectory(prefix="moectl-scale-") as tmp, \
            (servers.postgres() if "postgres" in args.databases else contextlib.nullcontext()) as pg:
        trees = {"today": export_tree(ref, pathlib.Path(tmp) / "today"), "new": REPO}
        for num_gpus in args.ranks:
            for database in args.databases:
                for code in args.codes:
                    for protocol in (["v1"] if code == "today" else args.protocols):
                        workdir = pathlib.Path(tmp) / uuid.uuid4().hex[:8]
                        workdir.mkdir()
                        url = f"sqlite:///{workdir / 'moectl.db'}" if database == "sqlite" else \
                            servers.create_database(*pg, f"s{uuid.uuid4().hex[:12]}")
                        runs.append(run_one(code, trees[code], database, url, num_gpus, protocol,
                                            num_windows=args.windows,
                                            hour_windows=args.hour_windows if code == "new" else 0,
                                            connections=args.connections, workdir=workdir))
    text = (f"# One controller at DeepSeek scale ({datetime.date.today()})\n\n"
            f"today = {ref[:10]}; {platform.machine()}, {os.cpu_count()} cores, load average "
            f"{os.getloadavg()[0]:.1f} at the end\n\n{table(runs)}\n\n{ratios(runs)}\n")
    print(text)
    if not args.no_write:
        path = REPO / "benchmarks" / "results" / f"scale-{datetime.date.today()}.md"
        path.write_text(text)
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
