"""`moectl up` (what `make run` calls): the whole system on one machine, started and stopped together.

By default: the controller (SQLite, this process) + a prefill and a decode instance of the bundled
runtime (EP groups of local processes, agents embedded) + the router + a workload generator. The
agent-side processes are started as `python -m agents.<module>`: the controller imports no agent
code. The pools' instances belong to the local pool scaler (controlplane/actuate/local.py), so the pool
planner can add and drain them; the router learns them through its admin API. `--sim` runs the simulated
fleet (`python -m agents.sim`) instead of workers, router and workload.
Prints one `name: URL` line per service; Ctrl-C (or SIGTERM) stops everything, children first, and
leaves no process behind. The database (MOECTL_DATABASE_URL, else the default every command shares) is
kept across runs: policies, tokens and the audit trail survive a restart; `--fresh` clears it first. On a
kept database the deployment keeps its policy (`--policy` registers a new deployment's only). Each pool starts
with one instance, and the loop brings it to the size moectl last decided. The new instances are named apart
from the earlier run's (`LocalScaler` run), whose agents go stale and then gone.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import threading
import time

import httpx
from sqlalchemy.engine import make_url

from agents.protocol.http import listening_socket
from controlplane.actuate.local import LocalScaler, LocalWorkers
from controlplane.actuate.processes import die_with_parent, stop_processes
from controlplane.actuate.scaler import PoolScaler
from controlplane.cmd.serve import Controller
from controlplane.config import Settings
from controlplane.store.db import reset

DEPLOYMENT = "tiny"  # what the workers report as (agents/worker/main.py)
# the embedded deployment's pool policy (README, "make run"): latency targets the tiny model meets on two shared
# cores, one prefill instance, one or two decode instances; a decode rank batches at most MAX_NUM_SEQS sequences,
# so the workload's peak needs more batch slots than one decode instance has (the worker's default is 32)
POOL_POLICY = {"mode": "auto", "slo": {"ttft_p90_seconds": 3.0, "itl_p90_seconds": 0.5},
               "replicas": {"prefill": {"min": 1, "max": 1}, "decode": {"min": 1, "max": 2}},
               "pool_cooldown_seconds": 40.0, "pool_predictive_interval_seconds": 20.0}
MAX_NUM_SEQS = 4
STARTUP_SECONDS = 15.0  # a local instance serves about this long after it is started (2 cores)


class Processes:
    """Child processes started and stopped together; a child that exits is reported, not hidden."""

    def __init__(self, env: dict[str, str]):
        self.env, self.children = env, {}

    def start(self, name: str, module: str, *args: str, pass_fds: tuple[int, ...] = ()) -> None:
        # a session of its own: a terminal's Ctrl-C reaches this process only, which stops the children in order
        self.children[name] = subprocess.Popen([sys.executable, "-m", module, *args], env=self.env, pass_fds=pass_fds,
                                               preexec_fn=die_with_parent, start_new_session=True)

    def exited(self) -> list[tuple[str, int]]:
        return [(name, p.returncode) for name, p in self.children.items() if p.poll() is not None]

    def stop(self) -> None:
        # loadgen and router first, the workers last
        stop_processes(dict(reversed(self.children.items())), signal.SIGINT)


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


def start_controller(settings: Settings, *, is_fresh: bool,
                     scaler: PoolScaler | None = None) -> tuple[Controller, threading.Thread]:
    """The controller in this process, its loop paced to the window, on the database cleared first if
    `is_fresh`; prints where to find it and where its state is kept."""
    shown = make_url(settings.database_url).render_as_string(hide_password=True)
    if is_fresh:
        reset(settings.database_url)
    print(f"database: {shown} ({'cleared' if is_fresh else 'kept across runs; --fresh clears it'})", flush=True)
    controller = Controller(settings.model_copy(update={"reconcile_seconds": settings.window_seconds}),
                            scaler=scaler)
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


def wait_serving(scaler: LocalScaler, roles: tuple[str, ...], processes: Processes, timeout: float,
                 stop: threading.Event) -> None:
    """Until every role has an instance the router routes to."""
    deadline = time.monotonic() + timeout
    while not all(scaler.serving(role) for role in roles):
        if stop.is_set() or processes.exited() or time.monotonic() > deadline:
            raise RuntimeError(f"the router did not get its first instances within {timeout:.0f}s")
        time.sleep(0.2)


def up(settings: Settings, *, ep_size: int, router_port: int | None = None, pool_policy: dict | None = None,
       loadgen_args: tuple[str, ...] | None = ("--rate", "4"), max_num_seqs: int | None = None,
       is_fresh: bool = False) -> int:
    """pool_policy: the policy fields the deployment registers with (default POOL_POLICY); loadgen_args: the
    workload generator's rate or schedule (None: no workload); max_num_seqs: sequences a worker rank batches at
    most (default MAX_NUM_SEQS)."""
    started = time.monotonic()
    url = f"http://{settings.host}:{settings.port}"
    # bound now, served by the router once the workers are up: no other process can take the port meanwhile
    try:
        router_socket = listening_socket(router_port or 0)
    except OSError as exc:
        print(f"error: the router's port {router_port}: {exc.strerror}; choose another (--router-port), or leave "
              "it out for a free one", flush=True)
        return 1
    router_url = f"http://127.0.0.1:{router_socket.getsockname()[1]}"
    admin_token = secrets.token_urlsafe(24)
    env = os.environ | {"MOECTL_AGENT_TOKEN": settings.agent_token, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    workers = LocalWorkers(DEPLOYMENT, {"prefill": ep_size, "decode": ep_size}, env=env, run=f"{secrets.token_hex(2)}-",
                           args=["--controller", url, "--window-seconds", f"{settings.window_seconds:g}",
                                 "--max-num-seqs", str(max_num_seqs or MAX_NUM_SEQS)])
    scaler = LocalScaler(workers, router=router_url, admin_token=admin_token)
    # the first instances start before the loop: on a kept database its first pass would otherwise start the
    # size moectl last decided beside them (the workers retry until the controller answers). The decode instance
    # registers the deployment (its model shape is the runtime's to say) with the pool policy; the prefill
    # instance retries its first windows until it exists
    policy = json.dumps(POOL_POLICY if pool_policy is None else pool_policy)
    first = [scaler.start("prefill"), scaler.start("decode", env={"MOECTL_API_TOKEN": settings.api_token},
                                                    args=("--policy", policy))]
    try:
        controller, thread = start_controller(
            settings.model_copy(update={"replica_startup_seconds": STARTUP_SECONDS}), is_fresh=is_fresh,
            scaler=scaler)
    except BaseException:
        scaler.stop()
        router_socket.close()
        raise
    processes = Processes(env | {"MOECTL_ROUTER_ADMIN_TOKEN": admin_token})
    stop = stop_on_signals()
    code = 0
    try:
        wait_ready([u for instance in first for u in instance.urls], processes, timeout=180, stop=stop)
        processes.start("router", "agents.router", "--port", router_url.rsplit(":", 1)[1],
                        "--fd", str(router_socket.fileno()), "--controller", url, "--deployment", DEPLOYMENT,
                        "--window-seconds", f"{settings.window_seconds:g}", pass_fds=(router_socket.fileno(),))
        router_socket.close()  # the router's now
        wait_ready([router_url], processes, timeout=60, stop=stop)
        wait_serving(scaler, ("prefill", "decode"), processes, timeout=60, stop=stop)
        print(f"router: {router_url}", flush=True)
        print("workers: " + " | ".join(f"{i.role} {' '.join(i.urls)}" for i in first) + " (/metrics each; the pool "
              "planner adds and drains decode instances)", flush=True)
        if loadgen_args is not None:
            processes.start("loadgen", "agents.loadgen", "--url", router_url, *loadgen_args)
        print(f"up in {time.monotonic() - started:.1f}s; press Ctrl-C to stop", flush=True)
        serve_until_stopped(processes, thread, stop)
    except RuntimeError as exc:
        print(f"error: {exc}", flush=True)
        code = 1
    finally:
        controller.stop_reconciling()  # first: the loop would start again the instances stopped below
        router_socket.close()  # if the router never started
        processes.stop()
        scaler.stop()
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
        controller.stop_reconciling()
        processes.stop()
        controller.stop()
        thread.join(timeout=10)
        print("stopped", flush=True)
    return 0
