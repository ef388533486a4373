"""Runs the controller: migrate the database, build the app, serve it with uvicorn."""

from __future__ import annotations

import logging
import threading
import time

import uvicorn

from controlplane.api.app import create_app
from controlplane.config import Settings
from controlplane.reconcile import reconcile_once
from controlplane.store.db import make_engine, make_sessions, upgrade

log = logging.getLogger("moectl")


def prepare(settings: Settings):
    """Brings the schema to head and returns a session factory."""
    upgrade(settings.database_url)
    return make_sessions(make_engine(settings.database_url))


def make_server(settings: Settings, *, run_loop: bool) -> uvicorn.Server:
    app = create_app(settings, prepare(settings), run_loop=run_loop)
    config = uvicorn.Config(app, host=settings.host, port=settings.port, log_level="warning")
    return uvicorn.Server(config)


def start_in_thread(server: uvicorn.Server, timeout: float = 30.0) -> threading.Thread:
    thread = threading.Thread(target=server.run, name="controller", daemon=True)
    thread.start()
    deadline = time.monotonic() + timeout
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError(f"controller did not start on {server.config.host}:{server.config.port}; "
                               f"is the port in use? pass --port or set MOECTL_PORT")
        time.sleep(0.05)
    return thread


def serve(settings: Settings, *, run_loop: bool, announce: bool) -> int:
    server = make_server(settings, run_loop=run_loop)
    if announce:
        print(f"controller: http://{settings.host}:{settings.port}", flush=True)
        print(f"api token: {settings.api_token}\nagent token: {settings.agent_token}", flush=True)
    server.run()
    return 0


def reconcile_command(settings: Settings, *, once: bool, dry_run: bool) -> int:
    sessions = prepare(settings)
    while True:
        result = reconcile_once(sessions, settings, now=time.time(), dry_run=dry_run)
        for plan in result.plans:
            print(f"{plan.deployment}/{plan.role}: {plan.decision.value}: {plan.reason}", flush=True)
        if once:
            return 1 if result.num_errors else 0
        time.sleep(settings.reconcile_seconds)
