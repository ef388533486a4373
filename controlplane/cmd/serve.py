"""Runs the controller: migrate the database, then the API (uvicorn) and the reconcile loop (a thread)."""

from __future__ import annotations

import logging
import secrets
import socket
import threading
import time
from dataclasses import replace

import uvicorn
from prometheus_client import CollectorRegistry
from sqlalchemy import Engine
from sqlalchemy.orm import Session, sessionmaker

from agents.protocol.http import KEEP_ALIVE_SECONDS
from controlplane.actuate import kube
from controlplane.actuate.fence import SOLE
from controlplane.actuate.scaler import PoolScaler
from controlplane.api.actuation import Actuation
from controlplane.api.app import create_app
from controlplane.cmd.startup_heap import freeze_startup_heap
from controlplane.config import Settings
from controlplane.leader.campaign import keep_campaigning
from controlplane.leader.database import DatabaseRecords
from controlplane.leader.elector import Elector, LeaderElector
from controlplane.leader.lease import LeaseRecords
from controlplane.loop.compute import WorkerProcess, in_process
from controlplane.loop.liveness import LoopLiveness
from controlplane.loop.prune import prune_all
from controlplane.loop.reconcile import Reconciler
from controlplane.loop.results import PassResult
from controlplane.loop.telemetry import ControllerMetrics
from controlplane.plan.decisions import decide
from controlplane.store.db import make_engine, make_sessions, upgrade

log = logging.getLogger("moectl")


def configure_tracing(settings: Settings) -> None:
    """Exports reconcile spans over OTLP/HTTP when MOECTL_OTLP_ENDPOINT is set (extra `otlp`)."""
    if not settings.otlp_endpoint:
        return
    try:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    except ImportError:
        log.warning("MOECTL_OTLP_ENDPOINT is set but the OTLP exporter is missing: pip install 'moectl[otlp]'")
        return
    from opentelemetry import trace
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    provider = TracerProvider(resource=Resource.create({"service.name": "moectl-controller"}))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=settings.otlp_endpoint)))
    trace.set_tracer_provider(provider)


def make_reconciler(settings: Settings, sessions: sessionmaker[Session], scaler: PoolScaler | None = None
                    ) -> tuple[Reconciler, LeaderElector | None]:
    """The reconcile with its pool scaler (`scaler`, else Kubernetes when targets are configured) and the leader
    elector (a Lease when one is named, else the database; none when leader election is off), chosen from the
    settings."""
    client = kube.api_client(settings.kubeconfig) if settings.kube_scale_targets or settings.lease_name else None
    identity = settings.leader_identity or f"{settings.pod_name or socket.gethostname()}-{secrets.token_hex(3)}"
    elector = None
    if settings.leader_election:
        records = (LeaseRecords(client, namespace=settings.lease_namespace or settings.pod_namespace or "default",
                                name=settings.lease_name) if settings.lease_name
                   else DatabaseRecords(sessions, lease_seconds=settings.leader_lease_seconds))
        elector = Elector(records, identity=identity, lease_seconds=settings.leader_lease_seconds,
                          renew_seconds=settings.leader_renew_seconds)
    if scaler is None and settings.kube_scale_targets:
        scaler = kube.KubeScaler(client, settings.kube_scale_targets,
                                 default_namespace=settings.pod_namespace or "default",
                                 field_manager=settings.kube_field_manager, reporting_instance=identity)
    return Reconciler(settings, scaler, elector or SOLE), elector


def engine_for(settings: Settings) -> Engine:
    """The controller's database. Among elected replicas, a transaction left idle for a lease (its replica
    paused or hung, so no longer leading) is ended by the database: its pool locks must not outlast its
    leadership and hold off the successor's writes."""
    idle = settings.leader_lease_seconds if settings.leader_election else None
    return make_engine(settings.database_url, timeout_seconds=settings.db_timeout_seconds,
                       max_idle_in_transaction_seconds=idle)


class Controller:
    """The API server and, unless disabled, the reconcile loop (with the leader election it needs), started
    and stopped together."""

    def __init__(self, settings: Settings, *, run_loop: bool = True, scaler: PoolScaler | None = None):
        """scaler: makes pool sizes real (default: Kubernetes' when scale targets are configured)."""
        upgrade(settings.database_url)
        configure_tracing(settings)
        self.settings = settings
        self.sessions = make_sessions(engine_for(settings))
        self.metrics = ControllerMetrics(CollectorRegistry())
        reconciler, self.elector = make_reconciler(settings, self.sessions, scaler)
        self.liveness = LoopLiveness.for_settings(settings) if run_loop else None
        app = create_app(settings, self.sessions, metrics=self.metrics, actuation=Actuation(reconciler),
                         liveness=self.liveness)
        self.server = uvicorn.Server(uvicorn.Config(app, host=settings.host, port=settings.port, log_level="warning",
                                                    timeout_keep_alive=KEEP_ALIVE_SECONDS))
        self.stop_loop = threading.Event()
        self.compute = WorkerProcess() if settings.plan_in_worker else None
        self.threads = []
        if run_loop and self.elector is not None:
            self.threads.append(threading.Thread(target=keep_campaigning, name="leader", daemon=True, kwargs=dict(
                elector=self.elector, stop=self.stop_loop, retry_seconds=settings.leader_retry_seconds)))
        if run_loop:
            loop = replace(reconciler, compute=self.compute or in_process)  # requests plan in their own thread
            self.threads.append(threading.Thread(target=loop.run_forever, name="reconcile", daemon=True, kwargs=dict(
                sessions=self.sessions, stop=self.stop_loop, liveness=self.liveness,
                on_pass=lambda r: self._observe(r, reconciler.fence.is_leading()))))

    def _observe(self, result: PassResult, is_leading: bool) -> None:
        self.metrics.observe_pass(result.plans, result.num_errors, result.seconds, is_leading=is_leading,
                                  pool_plans=result.pool_plans, reaches=result.reaches, balancers=result.balancers)
        self.metrics.observe_pools([(r.plan.deployment, r.plan.role, r.parked, r.mtp) for r in result.pools])

    @property
    def url(self) -> str:
        return f"http://{self.settings.host}:{self.settings.port}"

    def start(self, timeout: float = 30.0) -> threading.Thread:
        """Serves in a background thread; returns once the port accepts connections."""
        thread = threading.Thread(target=self.run, name="controller", daemon=True)
        thread.start()
        deadline = time.monotonic() + timeout
        while not self.server.started:
            if not thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"controller did not start on {self.url}; is the port in use? "
                                   f"pass --port or set MOECTL_PORT")
            time.sleep(0.05)
        return thread

    def run(self) -> None:
        """Serves in this thread until stopped (Ctrl-C, or `stop()` from another thread)."""
        if self.threads and self.elector is not None:
            try:  # a sole replica leads from its first pass
                self.elector.campaign()
            except Exception:
                log.exception("could not reach %s yet; campaigning in the background", self.elector.where)
        if self.threads and self.compute is not None:
            self.compute.start(decide)
        for thread in self.threads:
            thread.start()
        try:
            self.server.run()
        finally:
            self.stop_reconciling()
            if self.compute is not None:
                self.compute.close()

    def stop_reconciling(self) -> None:
        """Ends the loop (and the campaign, releasing the leadership) while the API still serves: `moectl up`
        stops the instances the loop would otherwise start again."""
        self.stop_loop.set()
        for thread in self.threads:
            if thread.ident is not None:
                thread.join(timeout=10)

    def stop(self) -> None:
        self.server.should_exit = True


def serve(settings: Settings, *, run_loop: bool, generated_tokens: dict[str, str]) -> int:
    """generated_tokens: setting name -> the token generated for it at start, printed once; a token taken
    from the environment is never printed (logs outlive secrets), only where it came from."""
    controller = Controller(settings, run_loop=run_loop)
    print(f"controller: {controller.url}", flush=True)
    if controller.elector is not None and run_loop:
        print(f"leader election: {controller.elector.where} as {controller.elector.identity}", flush=True)
    for name in ("api_token", "agent_token"):
        shown = generated_tokens.get(name) or f"(MOECTL_{name.upper()})"
        print(f"{name.replace('_', ' ')}: {shown}", flush=True)
    freeze_startup_heap()  # full collections during serving walk only what serving allocates
    controller.run()
    return 0


def reconcile_command(settings: Settings, *, once: bool, dry_run: bool) -> int:
    """Reconciles from the command line, as one more candidate of the election: while another replica leads
    (a running controller) it plans nothing."""
    upgrade(settings.database_url)
    sessions = make_sessions(engine_for(settings))
    reconciler, elector = make_reconciler(settings, sessions)
    try:
        while True:
            if elector is not None and not dry_run and not elector.campaign():
                print(f"{elector.where} is held by another replica: not reconciling", flush=True)
                if once:
                    return 2
            result = reconciler.run_pass(sessions, now=time.time(), dry_run=dry_run)
            for plan in result.plans:
                print(f"{plan.deployment}/{plan.role}: {plan.decision.value}: {plan.reason}", flush=True)
            if once:
                return 1 if result.num_errors else 0
            time.sleep(settings.reconcile_seconds)
    finally:
        if elector is not None:
            elector.release()


def prune_command(settings: Settings) -> int:
    """`moectl prune`: the loop's pruning job run until nothing is past its retention. It needs no leadership:
    it deletes only what no writer reads any more, so it may run beside a running controller."""
    upgrade(settings.database_url)
    engine = make_engine(settings.database_url, timeout_seconds=settings.db_timeout_seconds)
    try:
        pruned = prune_all(make_sessions(engine), settings, now=time.time())
    finally:
        engine.dispose()
    print(", ".join(f"{count} {kind}" for kind, count in pruned.items()) + " deleted", flush=True)
    return 0
