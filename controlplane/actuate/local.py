"""The pool scaler of the embedded deployment (`moectl up`): a pool's instances are local worker processes
(`python -m agents.worker`, never imported), registered with the router through its admin API
(agents/router/admin.py). A `PoolScaler` (actuate/scaler.py), as actuate/kube.py is on Kubernetes.

An instance is `starting` until every rank answers /healthz and the router has it, then `serving`. On a
scale-down the instances that go are `leaving`: the router drains them first (no new requests). An instance
is removed from the router and its process stopped only once the router has no request in flight there
(decodes, and prefills whose KV hand-off has not arrived) and its ranks hold no work. An instance whose process
dies is forgotten, so the next pass starts another. moectl is the only writer of these pools.
"""

from __future__ import annotations

import logging
import subprocess
import sys
import threading
import time
from dataclasses import dataclass

import httpx

from agents.protocol.http import listening_socket
from controlplane.actuate.fence import Fence
from controlplane.actuate.processes import STOP_SECONDS, die_with_parent, stop_processes
from controlplane.actuate.scaler import PoolRef, ScaleState

log = logging.getLogger("moectl.local")
STARTING, SERVING, LEAVING = "starting", "serving", "leaving"


@dataclass
class Instance:
    name: str
    role: str
    urls: list[str]  # one per rank
    process: subprocess.Popen
    started_at: float
    state: str = STARTING
    left_at: float | None = None
    is_drained: bool = False  # the router confirmed it sends it nothing new
    has_served: bool = False  # the router had it: it may hold requests


@dataclass(frozen=True)
class LocalWorkers:
    """What the pools' instances run.

    `deployment`: the moectl deployment the pools belong to. `ep_sizes`: role -> ranks per instance.
    `args`: what every `agents.worker` gets besides role, ranks, ports and instance (controller URL, window, ...).
    `env`: their environment. `run`: put in every instance's name (`tiny-decode-<run>0`), so a run on a kept
    database never takes an earlier run's instance for its own (its agents' windows and warm-up are counted per
    instance name). `module`: what an instance runs (`python -m MODULE`, the worker's arguments):
    `agents.worker`, or `agents.adapters.vllm.instance` (a vLLM server and its sidecar). `health_path`: answers 200
    once a rank serves. `load_path`: a rank's running and waiting requests (`/v1/internal/load`); "": it has none,
    and a drained instance is idle once the router has nothing in flight there (every request comes through it).
    `stop_seconds`: from SIGTERM to SIGKILL (a vLLM instance stops its server, up to 40 s, and cleans up after it)."""

    deployment: str
    ep_sizes: dict[str, int]
    args: list[str]
    env: dict[str, str]
    run: str = ""
    module: str = "agents.worker"
    health_path: str = "/healthz"
    load_path: str = "/v1/internal/load"
    stop_seconds: float = STOP_SECONDS


class LocalScaler:
    """Starts and stops `workers`' instances; `router`, `admin_token`: the router's URL and admin token."""

    def __init__(self, workers: LocalWorkers, *, router: str, admin_token: str, start_timeout: float = 180.0,
                 drain_timeout: float = 120.0, poll_seconds: float = 0.5):
        self.workers = workers
        self.router, self.start_timeout, self.drain_timeout = router.rstrip("/"), start_timeout, drain_timeout
        self.client = httpx.Client(timeout=5.0, headers={"Authorization": f"Bearer {admin_token}"})
        self.instances: dict[str, Instance] = {}
        self.num_started = dict.fromkeys(workers.ep_sizes, 0)
        self.lock, self.stopping = threading.RLock(), threading.Event()
        self.poll_seconds = poll_seconds
        self.watcher = threading.Thread(target=self._watch, name="local-scaler", daemon=True)
        self.watcher.start()

    # --- PoolScaler
    def manages(self, pool: PoolRef) -> bool:
        return pool.deployment == self.workers.deployment and pool.role in self.workers.ep_sizes

    def read(self, pool: PoolRef) -> ScaleState:
        with self.lock:
            mine = self._of(pool.role)
            asked = sum(i.state != LEAVING for i in mine)
            running = sum(i.state != STARTING for i in mine)  # serving, or leaving and not yet gone
        return ScaleState(target=f"local processes {pool}", replicas=asked, running=running, writer="moectl",
                          is_ours=True)

    def set_replicas(self, pool: PoolRef, replicas: int, *, expected: int, fence: Fence) -> ScaleState:
        """`expected` is not checked: nobody else runs these processes (an instance that died is replaced)."""
        with self.lock:
            asked = [i for i in self._of(pool.role) if i.state != LEAVING]
            # once stopping, nothing new starts: the controller's loop may still be running, and a process
            # started after stop() took its list of instances would outlive `moectl up`
            for _ in range(0 if self.stopping.is_set() else replicas - len(asked)):
                fence.check()
                self.start(pool.role)
            if replicas < len(asked):
                self._leave(pool.role, len(asked) - replicas, (), fence)
        return self.read(pool)

    def prepare_scale_down(self, pool: PoolRef, num_leaving: int, *, fence: Fence,
                           chosen: tuple[str, ...] = ()) -> list[str]:
        """Drains them at once: the router sends them nothing new from here on."""
        with self.lock:
            return self._leave(pool.role, num_leaving, chosen, fence)

    def report(self, pool: PoolRef, *, reason: str, message: str, is_warning: bool = False) -> None:
        log.log(logging.WARNING if is_warning else logging.INFO, "%s %s: %s", pool, reason, message)

    # --- the processes
    def start(self, role: str, env: dict[str, str] | None = None, args: tuple[str, ...] = ()) -> Instance:
        """Starts one instance of the pool `role` (ranks on free ports); the watcher registers it once ready.
        env, args: more for this one (the first registers the deployment). RuntimeError once stopping."""
        with self.lock:
            if self.stopping.is_set():
                raise RuntimeError("the local scaler is stopping: no instance starts")
            workers = self.workers
            name = f"{workers.deployment}-{role}-{workers.run}{self.num_started[role]}"
            self.num_started[role] += 1
            sockets = [listening_socket() for _ in range(workers.ep_sizes[role])]  # the ranks serve on them
            ports, fds = [s.getsockname()[1] for s in sockets], [s.fileno() for s in sockets]
            try:
                process = subprocess.Popen(
                    [sys.executable, "-m", workers.module, "--deployment", workers.deployment, "--role", role,
                     "--instance", name, "--ep-size", str(workers.ep_sizes[role]), "--ports", ",".join(map(str, ports)),
                     "--fds", ",".join(map(str, fds)), *workers.args, *args], env=workers.env | (env or {}),
                    pass_fds=fds, preexec_fn=die_with_parent,
                    start_new_session=True)  # a terminal's Ctrl-C is the controller's to handle: it stops instances
            finally:
                for sock in sockets:
                    sock.close()
            instance = Instance(name, role, [f"http://127.0.0.1:{p}" for p in ports], process, time.monotonic())
            self.instances[name] = instance
            log.info("%s: started (%s)", name, " ".join(instance.urls))
            return instance

    def stop(self) -> None:
        """Stops the watcher and every instance, leaving no process behind."""
        with self.lock:  # a start() under way finishes first, and is stopped below
            self.stopping.set()
        self.watcher.join(timeout=5)
        with self.lock:
            stop_processes({name: i.process for name, i in self.instances.items()}, timeout=self.workers.stop_seconds)
            self.instances.clear()
        self.client.close()

    def serving(self, role: str) -> list[Instance]:
        with self.lock:
            return [i for i in self._of(role) if i.state == SERVING]

    def _of(self, role: str) -> list[Instance]:
        return [i for i in self.instances.values() if i.role == role]

    def _leave(self, role: str, num_leaving: int, chosen: tuple[str, ...], fence: Fence) -> list[str]:
        """Picks who goes: the chosen first, then those not serving yet, then the newest."""
        staying = [i for i in self._of(role) if i.state != LEAVING]
        order = sorted(staying, key=lambda i: (i.name not in chosen, i.state == SERVING, -i.started_at))
        leaving = order[:max(0, num_leaving)]
        for instance in leaving:
            fence.check()
            instance.state, instance.left_at = LEAVING, time.monotonic()
            if instance.has_served:
                self._drain(instance)
        return [i.name for i in leaving]

    # --- the watcher: registers ready instances, retires drained ones, forgets dead ones
    def _watch(self) -> None:
        while not self.stopping.wait(self.poll_seconds):
            with self.lock:
                current = list(self.instances.values())
            for instance in current:
                try:
                    self._tend(instance)
                except Exception:
                    log.exception("%s: could not tend it; retrying", instance.name)

    def _tend(self, instance: Instance) -> None:
        if instance.process.poll() is not None:
            log.warning("%s exited with code %s: forgotten (the next pass starts another)", instance.name,
                        instance.process.returncode)
            self._forget(instance, force=True)
        elif instance.state == STARTING:
            if all(self._answers(url + self.workers.health_path) for url in instance.urls) and self._register(instance):
                with self.lock:
                    instance.has_served = True
                    if instance.state == STARTING:
                        instance.state = SERVING
                    else:  # it was told to leave while it registered: drain it from the start
                        instance.is_drained = False
                log.info("%s: serving (registered with the router)", instance.name)
            elif time.monotonic() - instance.started_at > self.start_timeout:
                log.warning("%s: not ready after %.0fs; stopping it", instance.name, self.start_timeout)
                self._forget(instance, force=True)
        elif instance.state == LEAVING and not instance.has_served:
            self._forget(instance, force=True)  # never had a request
        elif instance.state == LEAVING:
            if not instance.is_drained:
                self._drain(instance)
            overdue = time.monotonic() - instance.left_at > self.drain_timeout
            if (instance.is_drained and self._is_idle(instance)) or overdue:
                if overdue:
                    log.warning("%s: still busy %.0fs after its drain began; removing it anyway", instance.name,
                                self.drain_timeout)
                self._forget(instance, force=overdue)

    def _answers(self, url: str) -> bool:
        try:
            return httpx.get(url, timeout=1.0).status_code == 200
        except httpx.HTTPError:
            return False

    def _register(self, instance: Instance) -> bool:
        try:
            response = self.client.post(f"{self.router}/admin/instances",
                                        json={"name": instance.name, "role": instance.role, "urls": instance.urls})
        except httpx.HTTPError:
            return False  # the router is not up yet
        if response.status_code != 200:
            log.warning("%s: the router refused it: %d %s", instance.name, response.status_code, response.text)
        return response.status_code == 200

    def _drain(self, instance: Instance) -> None:
        """Tells the router to send it nothing new; an instance the router never had is drained already."""
        try:
            response = self.client.post(f"{self.router}/admin/instances/{instance.name}/drain")
        except httpx.HTTPError as exc:
            log.info("%s: could not reach the router to drain it (%s); retrying", instance.name, exc)
            return
        instance.is_drained = response.status_code in (200, 404)
        if instance.is_drained:
            log.info("%s: draining", instance.name)

    def _is_idle(self, instance: Instance) -> bool:
        """No request in flight at the router, and none running or waiting on any of its ranks."""
        try:
            listed = self.client.get(f"{self.router}/admin/instances").json()
            in_flight = next((i["num_in_flight"] for i in listed if i["name"] == instance.name), 0)
            path = self.workers.load_path
            loads = [httpx.get(url + path, timeout=1.0).json() for url in instance.urls] if path else []
        except (httpx.HTTPError, ValueError):
            return False
        return in_flight == 0 and all(load["num_running"] == 0 and load["num_waiting"] == 0 for load in loads)

    def _forget(self, instance: Instance, *, force: bool) -> None:
        try:
            response = self.client.delete(f"{self.router}/admin/instances/{instance.name}",
                                          params={"force": "true"} if force else None)
            if response.status_code == 409:
                return  # a request arrived after all: wait for it
        except httpx.HTTPError:
            if not force:
                return
        with self.lock:
            self.instances.pop(instance.name, None)
        stop_processes({instance.name: instance.process}, timeout=self.workers.stop_seconds)
        log.info("%s: removed and stopped", instance.name)
