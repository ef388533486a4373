"""A body over the limit is a 413 whether it announces its length or streams in chunks, on a real server."""

from __future__ import annotations

import httpx
import pytest
from support.auth import agent
from support.live import running_controller

LIMIT = 64 * 1024


def chunks(total: int, size: int = 8192):
    yield b"{"
    for _ in range(total // size):
        yield b" " * size
    yield b"}"


@pytest.mark.slow
def test_a_chunked_body_over_the_limit_gets_413(settings):
    with running_controller(settings.model_copy(update={"max_body_bytes": LIMIT})) as controller, \
            httpx.Client(base_url=controller.url, headers=agent() | {"Content-Type": "application/json"},
                         timeout=30) as http:
        chunked = http.post("/v1/agents/snapshot", content=chunks(4 * LIMIT))
        announced = http.post("/v1/agents/snapshot", content=b"{" + b" " * (4 * LIMIT) + b"}")
        small = http.post("/v1/agents/snapshot", content=chunks(LIMIT // 2))
        health = http.get("/healthz")  # the connection and the server are fine after a refusal
    assert chunked.status_code == 413 and "exceeds 65536 bytes" in chunked.json()["detail"], chunked.text
    assert announced.status_code == 413
    assert small.status_code == 422  # under the limit: read, and refused for what it says
    assert health.status_code == 200
