"""Health: /healthz is the loop's liveness, /readyz the database's readiness on a connection of its own."""

from __future__ import annotations

from fastapi.testclient import TestClient
from prometheus_client import CollectorRegistry

from controlplane.api.app import create_app
from controlplane.loop.liveness import LoopLiveness
from controlplane.loop.telemetry import ControllerMetrics


def app_client(settings, sessions, clock, **kwargs) -> TestClient:
    return TestClient(create_app(settings, sessions, clock=clock, metrics=ControllerMetrics(CollectorRegistry()),
                                 **kwargs))


def test_healthz_without_a_loop_and_readyz_with_the_database(client):
    assert client.get("/healthz").json() == {"status": "ok", "loop": None}
    assert client.get("/readyz").json() == {"status": "ok", "database": "ok"}


def test_healthz_is_503_when_the_loop_stalls(settings, sessions, clock):
    ticks = [0.0]
    liveness = LoopLiveness(interval_seconds=1, max_backoff_seconds=8, max_delay_seconds=6, clock=lambda: ticks[0])
    with app_client(settings, sessions, clock, liveness=liveness) as http:
        liveness.passed(is_ok=True)
        assert http.get("/healthz").json()["loop"]["status"] == "passing"
        ticks[0] = 8.0  # due at 1, not passed by 7
        stalled = http.get("/healthz")
        assert stalled.status_code == 503 and stalled.json()["loop"]["status"] == "stalled"


def test_readyz_is_503_while_the_database_does_not_answer(settings, sessions, clock, tmp_path):
    url = settings.database_url
    gone = (f"sqlite:///{tmp_path / 'missing-dir' / 'x.db'}" if url.startswith("sqlite")
            else url.rsplit("/", 1)[0] + "/no_such_database" + "?" + url.split("?", 1)[1])
    with app_client(settings.model_copy(update={"database_url": gone}), sessions, clock) as http:
        answer = http.get("/readyz")
    assert answer.status_code == 503 and answer.headers["Retry-After"] and "OperationalError" in answer.json()[
        "database"]
