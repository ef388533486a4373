"""A router's window over the API: its prompt-length buckets are stored with it, added up over the deployment's
routers, and read back as the window's length mix; buckets that do not add up are refused with a 422."""

from __future__ import annotations

import json

from support.auth import agent
from support.serving_windows import WINDOW, prompt_buckets, router_window_body
from support.store import register

from controlplane.store import deployments, serving


def post(client, body: dict):
    return client.post("/v1/agents/router-window", content=json.dumps(body),
                       headers=agent() | {"Content-Type": "application/json"})


def read_back(sessions, clock) -> tuple:
    with sessions() as session:
        deployment = deployments.get(session, "tiny")
        return serving.pool_windows(session, deployment, deployments.pools_of(session, deployment),
                                    before_index=int(clock.now // WINDOW) + 1, limit=10, grid_seconds=WINDOW)


def test_the_routers_buckets_add_up_into_the_windows_mix(client, sessions, clock):
    register(client)
    start = (clock.now // WINDOW - 1) * WINDOW
    for router, counts in (("router-0", prompt_buckets(b3=3, b7=1)), ("router-1", prompt_buckets(b3=1, b8=2))):
        answer = post(client, router_window_body(start, router=router, num_arrivals=sum(counts),
                                                 input_tokens=1000 * sum(counts), prompt_buckets=counts))
        assert answer.status_code == 200, answer.text
    [window] = read_back(sessions, clock)
    assert window.num_arrivals == 7
    assert window.prompt_buckets == prompt_buckets(b3=4, b7=1, b8=2)


def test_a_window_with_a_router_that_does_not_count_lengths_has_no_mix(client, sessions, clock):
    register(client)
    start = (clock.now // WINDOW - 1) * WINDOW
    assert post(client, router_window_body(start, num_arrivals=2, input_tokens=900,
                                           prompt_buckets=prompt_buckets(b4=2))).status_code == 200
    older = router_window_body(start, router="router-1", num_arrivals=3, input_tokens=900)
    del older["prompt_buckets"]  # as a router from before the field posts it
    assert post(client, older).status_code == 200
    [window] = read_back(sessions, clock)
    assert window.num_arrivals == 5 and window.prompt_buckets is None


def test_buckets_that_do_not_add_up_are_refused_and_nothing_is_stored(client, sessions, clock):
    register(client)
    start = (clock.now // WINDOW - 1) * WINDOW
    answer = post(client, router_window_body(start, num_arrivals=3, input_tokens=900,
                                             prompt_buckets=prompt_buckets(b4=2)))
    assert answer.status_code == 422
    assert "prompt_buckets sum to 2, not num_arrivals 3" in answer.text
    short = post(client, router_window_body(start, num_arrivals=3, input_tokens=900, prompt_buckets=[3]))
    assert short.status_code == 422 and "prompt_buckets" in short.text
    assert read_back(sessions, clock) == ()
