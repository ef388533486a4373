"""Runs the controller: migrate the database, then the API (uvicorn) and the reconcile loop (a thread)."""

from __future__ import annotations

import logging
import threading
import time

import uvicorn
from prometheus_client import CollectorRegistry

from controlplane.api.app import create_app
from controlplane.config import Settings
from controlplane.reconcile import PassResult, reconcile_once, run_forever
from controlplane.store.db import make_engine, make_sessions, upgrade
from controlplane.telemetry import ControllerMetrics

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


class Controller:
    """The API server and, unless disabled, the reconcile loop, started and stopped together."""

    def __init__(self, settings: Settings, *, run_loop: bool = True):
        upgrade(settings.database_url)
        configure_tracing(settings)
        self.settings = settings
        self.sessions = make_sessions(make_engine(settings.database_url))
        self.metrics = ControllerMetrics(CollectorRegistry())
        app = create_app(settings, self.sessions, metrics=self.metrics)
        self.server = uvicorn.Server(uvicorn.Config(app, host=settings.host, port=settings.port, log_level="warning"))
        self.stop_loop = threading.Event()
        self.loop = threading.Thread(target=run_forever, name="reconcile", daemon=True, kwargs=dict(
            sessions=self.sessions, settings=settings, stop=self.stop_loop,
            on_pass=self._observe)) if run_loop else None

    def _observe(self, result: PassResult) -> None:
        self.metrics.observe_pass(result.plans, result.num_errors, result.seconds)
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
        if self.loop is not None:
            self.loop.start()
        try:
            self.server.run()
        finally:
            self.stop_loop.set()
            if self.loop is not None:
                self.loop.join(timeout=10)

    def stop(self) -> None:
        self.server.should_exit = True


def serve(settings: Settings, *, run_loop: bool) -> int:
    controller = Controller(settings, run_loop=run_loop)
    print(f"controller: {controller.url}", flush=True)
    print(f"api token: {settings.api_token}\nagent token: {settings.agent_token}", flush=True)
    controller.run()
    return 0


def reconcile_command(settings: Settings, *, once: bool, dry_run: bool) -> int:
    upgrade(settings.database_url)
    sessions = make_sessions(make_engine(settings.database_url))
    while True:
        result = reconcile_once(sessions, settings, now=time.time(), dry_run=dry_run)
        for plan in result.plans:
            print(f"{plan.deployment}/{plan.role}: {plan.decision.value}: {plan.reason}", flush=True)
        if once:
            return 1 if result.num_errors else 0
        time.sleep(settings.reconcile_seconds)
