"""PostgreSQL stopped (`pg_ctl stop -m fast`) for 10 s under snapshot load, then started again: the
reconcile loop survives and resumes its passes, counts the failed ones, readiness says 503 while the
database is gone and 200 after, liveness stays 200 and says how the loop fares, snapshots are told to
retry (503) instead of 500, and pruning goes on."""

from __future__ import annotations

import threading
import time

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import create_engine, func, select
from support import servers
from support.auth import AGENT_TOKEN, API_TOKEN, agent
from support.live import live_fleet, running_controller
from support.servers import until

from controlplane.config import Settings
from controlplane.store.observed_tables import LoadWindow

OUTAGE_SECONDS = 10.0
HISTORY_WINDOWS = 5


def metric(http: httpx.Client, name: str) -> float:
    for family in text_string_to_metric_families(http.get("/metrics").text):
        for sample in family.samples:
            if sample.name == name:
                return sample.value
    return 0.0


@pytest.mark.slow
@pytest.mark.postgres
def test_the_loop_survives_a_postgres_restart_under_load():
    with servers.postgres() as (workdir, port):
        url = servers.create_database(workdir, port, "outage")
        settings = Settings(database_url=url, api_token=API_TOKEN, agent_token=AGENT_TOKEN, window_seconds=1.0,
                            reconcile_seconds=0.5, warmup_windows=0, history_windows=HISTORY_WINDOWS,
                            prune_seconds=1.0)  # the pruning job as often as a window closes (loop/prune.py)
        probes: list[tuple[float, str, int, dict]] = []
        posted: list[tuple[float, int]] = []
        with running_controller(settings, run_loop=True) as controller, \
                httpx.Client(base_url=controller.url, timeout=10) as http:
            [instance] = live_fleet(controller.url, {"mode": "observe"}, num_windows=1, window_seconds=1.0)
            stop = threading.Event()

            def load() -> None:  # every rank posts the current window, as agents do
                while not stop.is_set():
                    for snapshot in instance.window(time.time() - 1.0, 1.0, 4096):
                        try:
                            code = http.post("/v1/agents/snapshot", content=snapshot.model_dump_json(),
                                             headers=agent() | {"Content-Type": "application/json"}).status_code
                        except httpx.TransportError:
                            code = -1
                        posted.append((time.monotonic(), code))
                    stop.wait(0.5)

            def probe() -> None:
                while not stop.is_set():
                    for path in ("/healthz", "/readyz"):
                        response = http.get(path)
                        probes.append((time.monotonic(), path, response.status_code, response.json()))
                    stop.wait(0.25)

            threads = [threading.Thread(target=load), threading.Thread(target=probe)]
            for thread in threads:
                thread.start()
            try:
                until("the loop's first passes", lambda: metric(http, "moectl_controller_reconcile_seconds_count") > 2,
                      timeout=30)
                servers.stop_postgres(workdir)
                down_at = time.monotonic()
                time.sleep(OUTAGE_SECONDS)
                up_at = time.monotonic()  # before the start: PostgreSQL accepts before `pg_ctl -w start` returns
                servers.start_postgres(workdir, port)
                passes_at_up = metric(http, "moectl_controller_reconcile_seconds_count")
                until("the loop to pass again", lambda: metric(http, "moectl_controller_reconcile_seconds_count")
                      > passes_at_up + 5, timeout=60)
                time.sleep(HISTORY_WINDOWS + 2.0)  # a few more windows: pruning keeps up with them
                errors = metric(http, "moectl_controller_reconcile_errors_total")
            finally:
                stop.set()
                for thread in threads:
                    thread.join(timeout=30)
        engine = create_engine(url)
        with engine.connect() as conn:
            num_windows = conn.scalar(select(func.count()).select_from(LoadWindow))
        engine.dispose()

    def during(path: str) -> list[tuple[int, dict]]:
        return [(c, b) for t, p, c, b in probes if p == path and down_at + 1 < t < up_at]

    last = {p: (c, b) for _, p, c, b in probes}
    print({"reconcile errors": errors, "windows kept": num_windows,
           "posts": {c: [x for _, x in posted].count(c) for c in {x for _, x in posted}},
           "readyz during": len(during("/readyz")), "healthz during": len(during("/healthz")),
           "most consecutive failures": max(b["loop"]["consecutive_failures"] for _, b in during("/healthz"))})
    assert errors > 0
    assert {c for c, _ in during("/readyz")} == {503} and last["/readyz"][0] == 200, during("/readyz")
    assert {c for c, _ in during("/healthz")} == {200}, during("/healthz")  # alive: restarting cannot help
    assert max(b["loop"]["consecutive_failures"] for _, b in during("/healthz")) > 0
    assert last["/healthz"][0] == 200 and last["/healthz"][1]["loop"]["consecutive_failures"] == 0, last
    assert 500 not in {c for _, c in posted}, {c: [x for _, x in posted].count(c) for _, c in posted}
    assert {c for t, c in posted if down_at + 1 < t < up_at} <= {503, -1}
    assert num_windows <= HISTORY_WINDOWS + 3, num_windows  # complete windows beyond the history are pruned
