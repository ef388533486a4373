"""Shared fixtures: a migrated database (SQLite by default, PostgreSQL for tests marked so), an app
with an injected clock and registry, and an HTTP client to it. The Kubernetes test cluster's fixtures
(`kube_cluster`, `kube_namespace`) come from the plugin below."""

from __future__ import annotations

import uuid

import pytest
from fastapi.testclient import TestClient
from prometheus_client import CollectorRegistry
from support import servers
from support.auth import AGENT_TOKEN, API_TOKEN
from support.clock import Clock

from controlplane.api.app import create_app
from controlplane.config import Settings
from controlplane.loop.telemetry import ControllerMetrics
from controlplane.store.db import make_engine, make_sessions, upgrade

pytest_plugins = ["support.kube.fixture", "support.reports", "support.exclusive", "pytester"]


def _import_anyio_now() -> None:
    """anyio imports its parts on first use, and pytest rewrites a plugin's modules (anyio is one) as they are
    imported; once Playwright's greenlets have switched stacks, CPython 3.11's ast.parse fails there
    (tests/support/reports.py), and with it the static file a dashboard test's server was sending: the page
    never loaded. Imported here, at collection, before any greenlet runs."""
    import anyio
    import anyio._backends._asyncio  # noqa: F401  the event loop's backend, loaded on first use too
    import anyio.from_thread  # noqa: F401

    for name in dir(anyio):
        getattr(anyio, name)


_import_anyio_now()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Exclusive tests first (support/exclusive.py: they run alone, best before the others start), then those that
    start real processes: under xdist (make test) a worker that takes a long test last holds the whole run up
    after the others have finished."""
    items.sort(key=lambda item: (item.get_closest_marker("exclusive") is None, item.get_closest_marker("slow") is None))


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture(scope="session")
def postgres_server():
    with servers.postgres() as server:
        yield server


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def database_url(request, tmp_path) -> str:
    """Every test that touches the database runs on SQLite and on a real PostgreSQL."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'moectl.db'}"
    socket_dir, port = request.getfixturevalue("postgres_server")
    return servers.create_database(socket_dir, port, f"t{uuid.uuid4().hex[:12]}")


@pytest.fixture
def settings(database_url) -> Settings:
    # warmup 0: each posted window is aggregated, so tests can count rows; warmup has its own test
    return Settings(database_url=database_url, api_token=API_TOKEN, agent_token=AGENT_TOKEN, window_seconds=10.0,
                    warmup_windows=0)


@pytest.fixture
def sessions(settings):
    upgrade(settings.database_url)
    engine = make_engine(settings.database_url, timeout_seconds=settings.db_timeout_seconds)
    yield make_sessions(engine)
    engine.dispose()


@pytest.fixture
def client(settings, sessions, clock):
    app = create_app(settings, sessions, clock=clock, metrics=ControllerMetrics(CollectorRegistry()))
    with TestClient(app) as test_client:
        yield test_client
