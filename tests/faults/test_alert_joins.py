"""A storm of 200 Alertmanager deliveries at once for one pool, over real HTTP: they make one action and
every one of them is recorded on it (none lost to a concurrent read-modify-write); never a 500."""

from __future__ import annotations

import time

import httpx
import pytest
from support.alerts import alert, payload
from support.auth import operator
from support.live import at_once, live_fleet, running_controller

NUM_DELIVERIES = 200  # four per thread: every thread races the others more than once


@pytest.mark.slow
def test_a_storm_of_concurrent_deliveries_all_join_one_action(settings):
    with running_controller(settings) as controller, \
            httpx.Client(base_url=controller.url, headers=operator(), timeout=60) as http:
        live_fleet(controller.url, {"mode": "auto", "cooldown_seconds": 3600}, num_windows=2,
                   window_seconds=settings.window_seconds)

        def deliver(i: int) -> list[int]:
            """Alertmanager's way: retried while the answer is a 5xx or none comes (-1), for up to 3 minutes."""
            codes, give_up_at = [], time.monotonic() + 180
            while time.monotonic() < give_up_at:
                try:
                    response = http.post("/v1/alerts/alertmanager", json=payload(alert(f"storm{i:03d}")))
                except httpx.TimeoutException:
                    codes.append(-1)
                    continue
                codes.append(response.status_code)
                if response.status_code < 500:
                    break
                time.sleep(float(response.headers.get("Retry-After", 1)))
            return codes

        answers = at_once(deliver, NUM_DELIVERIES, num_threads=50)
        listed = http.get("/v1/deployments/sim-0/actions").json()
    codes = [code for attempt in answers for code in attempt]
    placement = [a for a in listed if a["kind"] == "placement"]
    recorded = sorted(a["fingerprint"] for action in placement for a in action["alerts"])
    summary = {"answers": {c: codes.count(c) for c in set(codes)}, "actions": len(placement),
               "recorded": len(recorded), "distinct": len(set(recorded))}
    print(summary)
    assert 500 not in codes and all(attempt[-1] == 200 for attempt in answers), summary
    assert len(placement) == 1, summary
    assert recorded == [f"storm{i:03d}" for i in range(NUM_DELIVERIES)], summary
