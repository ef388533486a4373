"""100 admins changing one policy at once, over real HTTP: every answer is a success, a 412 (If-Match
names a version that is no longer current), a 409, or on SQLite's one write lock a 503 + Retry-After when
the queue is longer than the database timeout; never a 500. Every success is one version, none lost."""

from __future__ import annotations

import httpx
import pytest
from support.auth import operator
from support.live import at_once, running_controller

MODEL = {"name": "tiny", "num_layers": 2, "num_experts": 8, "num_groups": 2, "top_k": 2}
NUM_WRITERS = 100


@pytest.mark.slow
def test_concurrent_policy_puts_never_500(settings):
    with running_controller(settings) as controller, \
            httpx.Client(base_url=controller.url, headers=operator(), timeout=30) as http:
        assert http.put("/v1/deployments/tiny", json={"model": MODEL}).status_code == 200

        def put(i: int, if_match: str | None = None) -> int:
            headers = {"If-Match": if_match} if if_match else {}
            return http.put("/v1/deployments/tiny/policy", headers=headers,
                            json={"mode": "observe", "cooldown_seconds": float(i)}).status_code

        blind = at_once(put, NUM_WRITERS, num_threads=32)
        after_blind = http.get("/v1/deployments/tiny/policy").headers["ETag"]
        guarded = at_once(lambda i: put(i, after_blind), NUM_WRITERS, num_threads=32)
        versions = [v["version"] for v in http.get("/v1/deployments/tiny/policy/versions").json()]
    counts = {"blind": {c: blind.count(c) for c in set(blind)}, "guarded": {c: guarded.count(c) for c in set(guarded)}}
    print(counts)
    assert set(blind) <= {200, 409, 503} and set(guarded) <= {200, 409, 412, 503}, counts
    assert guarded.count(200) == 1, counts  # one writer read the current version; the rest are told to re-read
    assert sorted(versions) == list(range(1, 2 + blind.count(200) + 1)), (counts, versions)
