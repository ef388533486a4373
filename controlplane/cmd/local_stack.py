"""What `moectl up` runs around its pool (controlplane/cmd/up.py, controlplane/cmd/up_vllm.py): the controller in
this process, the router and the other child processes, started together, served until a signal and stopped
together, children first.

`LocalStack` binds the router's port before anything starts, starts the controller over the local pool scaler,
runs the engine's own bring-up, the workload, then serves; on an error, a signal or the controller's exit it stops
the loop first (it would start again the instances stopped below), then the children, the pool and the controller.
"""

from __future__ import annotations

import os
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable

import httpx
from sqlalchemy.engine import make_url

from agents.protocol.http import listening_socket
from controlplane.actuate.local import LocalScaler
from controlplane.actuate.processes import die_with_parent, stop_processes
from controlplane.actuate.scaler import PoolScaler
from controlplane.cmd.serve import Controller
from controlplane.config import Settings
from controlplane.store.db import reset


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


class LocalStack:
    """One `moectl up` run over a local pool: `bind`, then `run` with the pool's scaler and its bring-up."""

    def __init__(self, settings: Settings, router_socket: socket.socket):
        self.started = time.monotonic()
        self.settings, self.router_socket = settings, router_socket
        self.url = f"http://{settings.host}:{settings.port}"  # the controller's
        self.router_url = f"http://127.0.0.1:{router_socket.getsockname()[1]}"
        self.admin_token = secrets.token_urlsafe(24)  # the router's admin API, which the pool scaler calls
        self.env = os.environ | {"MOECTL_AGENT_TOKEN": settings.agent_token, "OMP_NUM_THREADS": "1",
                                 "PYTHONUNBUFFERED": "1"}
        self.processes = Processes(self.env | {"MOECTL_ROUTER_ADMIN_TOKEN": self.admin_token})
        self.stop = threading.Event()

    @classmethod
    def bind(cls, settings: Settings, router_port: int | None) -> LocalStack | None:
        """The router's port bound now, served by the router once the pool is up: no other process can take it
        meanwhile. None (and says what to do) when it is taken."""
        try:
            return cls(settings, listening_socket(router_port or 0))
        except OSError as exc:
            print(f"error: the router's port {router_port}: {exc.strerror}; choose another (--router-port), or leave "
                  "it out for a free one", flush=True)
            return None

    def run(self, scaler: LocalScaler, *, startup_seconds: float, is_fresh: bool, bring_up: Callable[[], None],
            loadgen_args: tuple[str, ...] | None) -> int:
        """The controller over `scaler` (its first instances already starting), then `bring_up` (which starts the
        router and waits for the pool; a RuntimeError says what failed), the workload (None: none), served until
        a signal. startup_seconds: how long an instance takes to serve. 0 when stopped, 1 on an error."""
        try:
            controller, thread = start_controller(
                self.settings.model_copy(update={"replica_startup_seconds": startup_seconds}), is_fresh=is_fresh,
                scaler=scaler)
        except BaseException:
            scaler.stop()
            self.router_socket.close()
            raise
        self.stop = stop_on_signals()
        code = 0
        try:
            bring_up()
            if loadgen_args is not None:
                self.processes.start("loadgen", "agents.loadgen", "--url", self.router_url, *loadgen_args)
            print(f"up in {time.monotonic() - self.started:.1f}s; press Ctrl-C to stop", flush=True)
            serve_until_stopped(self.processes, thread, self.stop)
        except RuntimeError as exc:
            print(f"error: {exc}", flush=True)
            code = 1
        finally:
            controller.stop_reconciling()  # first: the loop would start again the instances stopped below
            self.router_socket.close()  # if the router never started
            self.processes.stop()
            scaler.stop()
            controller.stop()
            thread.join(timeout=10)
            print("stopped", flush=True)
        return code

    def start_router(self, deployment: str, *args: str) -> None:
        """The router on the bound port, in front of `deployment`'s pool; args: its engine's options. Returns once
        it answers."""
        fd = self.router_socket.fileno()
        self.processes.start("router", "agents.router", "--port", self.router_url.rsplit(":", 1)[1], *args,
                             "--fd", str(fd), "--controller", self.url, "--deployment", deployment,
                             "--window-seconds", f"{self.settings.window_seconds:g}", pass_fds=(fd,))
        self.router_socket.close()  # the router's now
        self.wait_ready([self.router_url], timeout=60)

    def wait_ready(self, urls: list[str], timeout: float) -> None:
        wait_ready(urls, self.processes, timeout=timeout, stop=self.stop)

    def wait_serving(self, scaler: LocalScaler, roles: tuple[str, ...], timeout: float) -> None:
        """Until every role has an instance the router routes to."""
        deadline = time.monotonic() + timeout
        while not all(scaler.serving(role) for role in roles):
            if self.stop.is_set() or self.processes.exited() or time.monotonic() > deadline:
                raise RuntimeError(f"the router did not get its first instances within {timeout:.0f}s")
            time.sleep(0.2)
