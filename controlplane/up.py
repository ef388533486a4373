"""`moectl up` (what `make run` calls): the whole system on one machine, started and stopped together.

By default: the controller (SQLite, this process) + a prefill and a decode instance of the bundled
runtime (EP groups of local processes, agents embedded) + the router + a workload generator. The
agent-side processes are started as `python -m agents.<module>`: the controller imports no agent
code. `--sim` runs the simulated fleet (`python -m agents.sim`) instead of workers, router and workload.
Prints one `name: URL` line per service; Ctrl-C (or SIGTERM) stops everything, children first, and
leaves no process behind. The database (MOECTL_DATABASE_URL, else the default every command shares) is
kept across runs: policies, tokens and the audit trail survive a restart; `--fresh` clears it first.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time

import httpx
from sqlalchemy.engine import make_url

from controlplane.config import Settings
from controlplane.serve import Controller
from controlplane.store.db import reset

STOP_SECONDS = 20.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _die_with_parent() -> None:
    # runs in the child before exec: Linux sends it SIGTERM if this process dies without cleaning up
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except OSError:
        pass


class Processes:
    """Child processes started and stopped together; a child that exits is reported, not hidden."""

    def __init__(self, env: dict[str, str]):
        self.env, self.children = env, {}

    def start(self, name: str, module: str, *args: str, env: dict[str, str] | None = None) -> None:
        self.children[name] = subprocess.Popen([sys.executable, "-m", module, *args], env=self.env | (env or {}),
                                               preexec_fn=_die_with_parent)

    def exited(self) -> list[tuple[str, int]]:
        return [(name, p.returncode) for name, p in self.children.items() if p.poll() is not None]

    def stop(self) -> None:
        for p in reversed(self.children.values()):  # loadgen and router first, the workers last
            if p.poll() is None:
                p.send_signal(signal.SIGINT)
        deadline = time.monotonic() + STOP_SECONDS
        for name, p in self.children.items():
            try:
                p.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                print(f"{name} did not stop in {STOP_SECONDS:.0f}s; killing it", flush=True)
                p.kill()
                p.wait()


def wait_ready(urls: list[str], processes: Processes, timeout: float, stop: threading.Event) -> None:
    deadline = time.monotonic() + timeout
    pending = list(urls)
    while pending:
        if stop.is_set():
            raise RuntimeError("stopped while starting")
        if processes.exited():
            raise RuntimeError(f"exited while starting: {processes.exited()}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"not ready after {timeout:.0f}s: {pending}")
        try:
            if httpx.get(pending[0] + "/healthz", timeout=1).status_code == 200:
                pending.pop(0)
                continue
        except httpx.HTTPError:
            pass
        time.sleep(0.2)


def start_controller(settings: Settings, *, is_fresh: bool) -> tuple[Controller, threading.Thread]:
    """The controller in this process, its loop paced to the window, on the database cleared first if
    `is_fresh`; prints where to find it and where its state is kept."""
    shown = make_url(settings.database_url).render_as_string(hide_password=True)
    if is_fresh:
        reset(settings.database_url)
    print(f"database: {shown} ({'cleared' if is_fresh else 'kept across runs; --fresh clears it'})", flush=True)
    controller = Controller(settings.model_copy(update={"reconcile_seconds": settings.window_seconds}))
    thread = controller.start()
    print(f"controller: {controller.url}", flush=True)
    print(f"dashboard: {controller.url}/", flush=True)
    print(f"api token: {settings.api_token}", flush=True)
    return controller, thread


def stop_on_signals() -> threading.Event:
    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())
    return stop


def serve_until_stopped(processes: Processes, controller_thread: threading.Thread, stop: threading.Event) -> None:
    reported: set[str] = set()
    while not stop.is_set() and controller_thread.is_alive():
        for name, returncode in processes.exited():
            if name not in reported:  # the controller sees its agents go stale; say it here too
                print(f"{name} exited with code {returncode}", flush=True)
                reported.add(name)
        stop.wait(0.5)


def up(settings: Settings, *, ep_size: int, router_port: int | None = None, rate: float = 4.0,
       is_loadgen: bool = True, is_fresh: bool = False) -> int:
    started = time.monotonic()
    controller, thread = start_controller(settings, is_fresh=is_fresh)
    url = controller.url
    env = os.environ | {"MOECTL_AGENT_TOKEN": settings.agent_token, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    processes = Processes(env)
    stop = stop_on_signals()
    code = 0
    try:
        ranks = {}
        for role in ("prefill", "decode"):
            ranks[role] = [f"http://127.0.0.1:{free_port()}" for _ in range(ep_size)]
            # one instance registers the deployment (its model shape is the runtime's to say); the other
            # retries its first windows until it exists
            register = {"MOECTL_API_TOKEN": settings.api_token if role == "decode" else ""}
            processes.start(f"{role} worker", "agents.worker", "--role", role, "--ep-size", str(ep_size),
                            "--ports", ",".join(u.rsplit(":", 1)[1] for u in ranks[role]), "--controller", url,
                            "--window-seconds", f"{settings.window_seconds:g}", env=register)
        wait_ready(ranks["prefill"] + ranks["decode"], processes, timeout=180, stop=stop)
        router_url = f"http://127.0.0.1:{router_port or free_port()}"
        processes.start("router", "agents.router", "--port", router_url.rsplit(":", 1)[1],
                        "--prefill", ",".join(ranks["prefill"]), "--decode", ",".join(ranks["decode"]))
        wait_ready([router_url], processes, timeout=60, stop=stop)
        print(f"router: {router_url}", flush=True)
        print(f"workers: prefill {' '.join(ranks['prefill'])} | decode {' '.join(ranks['decode'])} (/metrics each)",
              flush=True)
        if is_loadgen:
            processes.start("loadgen", "agents.loadgen", "--url", router_url, "--rate", f"{rate:g}")
        print(f"up in {time.monotonic() - started:.1f}s; press Ctrl-C to stop", flush=True)
        serve_until_stopped(processes, thread, stop)
    except RuntimeError as exc:
        print(f"error: {exc}", flush=True)
        code = 1
    finally:
        processes.stop()
        controller.stop()
        thread.join(timeout=10)
        print("stopped", flush=True)
    return code


def up_sim(settings: Settings, *, num_deployments: int, ep_size: int, is_fresh: bool = False) -> int:
    """The simulated fleet as one child process: hundreds of GPUs' worth of snapshots, no model."""
    controller, thread = start_controller(settings, is_fresh=is_fresh)
    processes = Processes(os.environ | {"MOECTL_API_TOKEN": settings.api_token,
                                        "MOECTL_AGENT_TOKEN": settings.agent_token, "PYTHONUNBUFFERED": "1"})
    stop = stop_on_signals()
    processes.start("sim", "agents.sim", "--url", controller.url, "--deployments", str(num_deployments),
                    "--ep-size", str(ep_size), "--slots-per-rank", str(max(2, 80 // ep_size)),
                    "--window-seconds", f"{settings.window_seconds:g}", "--mode", "auto")
    print(f"sim: {num_deployments} deployments x {ep_size} ranks, {settings.window_seconds:g}s windows", flush=True)
    print("press Ctrl-C to stop", flush=True)
    try:
        serve_until_stopped(processes, thread, stop)
    finally:
        processes.stop()
        controller.stop()
        thread.join(timeout=10)
        print("stopped", flush=True)
    return 0
