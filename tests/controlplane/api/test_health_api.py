"""Health: /healthz is the loop's liveness, /readyz the database's readiness on a connection of its own; a
request that queued past the database timeout is answered 503 + Retry-After before it touches the database."""

from __future__ import annotations

from fastapi.testclient import TestClient
from prometheus_client import CollectorRegistry
from support.auth import operator

from controlplane.api.app import create_app
from controlplane.liveness import LoopLiveness
from controlplane.telemetry import ControllerMetrics


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


def test_a_request_that_queued_past_the_timeout_is_refused_before_it_starts(client, settings, sessions, clock):
    impatient = settings.model_copy(update={"db_timeout_seconds": 1e-9})
    with app_client(impatient, sessions, clock) as http:
        refused = http.put("/v1/deployments/tiny", headers=operator(), json={"model": {
            "name": "tiny", "num_layers": 2, "num_experts": 8, "num_groups": 2, "top_k": 2}})
        assert refused.status_code == 503 and refused.headers["Retry-After"] == "1", refused.text
        assert "overloaded" in refused.json()["detail"]
        assert http.get("/healthz").status_code == 200  # health never queues for the database
    assert client.get("/v1/deployments").json() == []  # nothing was stored
