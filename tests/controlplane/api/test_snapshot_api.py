"""Agents' snapshot endpoint: bad input gets a 4xx naming the problem and stores nothing."""

from __future__ import annotations

import base64
import json
import zlib

import numpy as np
import pytest
from sqlalchemy import select
from support.auth import agent, operator
from support.store import MODEL, register, snapshot, stored

from controlplane.store import deployments
from controlplane.store.knobs import CAPACITY_FACTOR
from controlplane.store.observed_tables import LoadWindow


def good(clock, **overrides) -> dict:
    return snapshot(window_start=clock.now - 10).model_dump(mode="json") | overrides


def encode(array: np.ndarray) -> dict:
    kind = "float64" if array.dtype.kind == "f" else "int64"
    raw = array.astype("<f8" if kind == "float64" else "<i8").tobytes()
    return {"dtype": kind, "shape": list(array.shape), "data": base64.b64encode(zlib.compress(raw)).decode()}


@pytest.fixture
def registered(client):
    register(client)


def post(client, body, headers=None):
    return client.post("/v1/agents/snapshot", content=json.dumps(body),
                       headers=(headers if headers is not None else agent()) | {"Content-Type": "application/json"})


BAD = {
    "wrong shape": (lambda c: good(c, expert_tokens=encode(np.ones((2, 7)))), 422, "expert_tokens has shape [2, 7]"),
    "negative": (lambda c: good(c, slot_tokens=encode(-np.ones((2, 5), np.int64))), 422, "negative counts"),
    "non-finite": (lambda c: good(c, expert_tokens=encode(np.full((2, 8), np.nan))), 422, "non-finite"),
    "bytes short": (lambda c: good(c, expert_tokens={**encode(np.ones((2, 4))), "shape": [2, 8]}), 422, "needs 128"),
    "rank outside": (lambda c: good(c, identity={**good(c)["identity"], "rank": 2}), 422, "outside an EP group"),
    "hits > queries": (lambda c: good(c, prefix_query_tokens=1, prefix_hit_tokens=2), 422, "prefix_hit_tokens"),
    "unknown deployment": (lambda c: good(c, identity={**good(c)["identity"], "deployment": "nope"}), 404,
                           "'nope' is not registered"),
    "other model": (lambda c: good(c, model={**MODEL.model_dump(), "top_k": 3}), 409, "top_k=3 (registered 2)"),
    "version never issued": (lambda c: good(c, placement_version=7), 409, "placement_version 7 was never issued"),
    "old window": (lambda c: good(c, window_start=c.now - 10_000), 422, "accepts windows up to 300s old"),
    "future window": (lambda c: good(c, window_start=c.now + 3600), 422, "in the future"),
    "old protocol": (lambda c: good(c, protocol="moectl.v0"), 422, "this controller speaks 'moectl.v1'"),
}


@pytest.mark.parametrize("case", list(BAD))
def test_bad_snapshot_is_refused_and_nothing_is_stored(case, client, sessions, clock, registered):
    make, status, message = BAD[case]
    response = post(client, make(clock))
    assert response.status_code == status, response.text
    assert message in response.json()["detail"]
    assert stored(sessions) == (0, 0)
    ok = post(client, good(clock))
    assert ok.status_code == 200, ok.text
    assert stored(sessions) == (1, 1)


def test_oversized_body_is_refused(client, sessions, clock, registered):
    response = client.post("/v1/agents/snapshot", content=b"{" + b" " * (9 * 1024 * 1024) + b"}",
                           headers=agent() | {"Content-Type": "application/json"})
    assert response.status_code == 413 and "exceeds" in response.json()["detail"]
    assert stored(sessions) == (0, 0)


def test_snapshots_need_a_token(client, sessions, clock, registered):
    assert post(client, good(clock), headers={}).status_code == 401
    assert post(client, good(clock), headers={"Authorization": "Bearer wrong"}).status_code == 401
    viewer = client.post("/v1/tokens", json={"name": "v", "role": "viewer"}, headers=operator()).json()["token"]
    refused = post(client, good(clock), headers={"Authorization": f"Bearer {viewer}"})
    assert refused.status_code == 403 and "needs agent" in refused.json()["detail"]
    assert stored(sessions) == (0, 0)


def test_a_retried_window_is_counted_once(client, sessions, clock, registered):
    assert post(client, good(clock)).status_code == 200
    assert post(client, good(clock)).status_code == 200
    with sessions() as session:
        window = session.scalar(select(LoadWindow))
        assert window.num_reports == 1


def test_the_answer_carries_the_table_only_to_ranks_that_run_another_version(client, clock, registered):
    answer = post(client, good(clock)).json()
    assert answer["placement_version"] == 0 and "slot_to_expert" not in answer


def test_the_answer_carries_the_policys_knobs(client, clock, registered):
    client.put("/v1/deployments/tiny/policy", json={"local_prefill_threshold": 512}, headers=operator())
    answer = post(client, good(clock)).json()
    assert answer["local_prefill_threshold"] == 512 and answer["window_seconds"] == 10


def test_the_answer_carries_the_pools_capacity_factor_and_the_window_its_dropped_assignments(client, sessions, clock,
                                                                                          registered):
    assert post(client, good(clock)).json()["routing"] == {}  # version 0: no cap, no limit
    with sessions() as session, session.begin():
        [pool] = deployments.pools_of(session, deployments.get(session, "tiny"))
        CAPACITY_FACTOR.versions.add(session, pool=pool, version=1, value=1.25, action_id=None, now=clock.now)
    clock.now += 10
    answer = post(client, good(clock, dropped_tokens=17)).json()
    assert answer["routing"] == {"expert_capacity_factor": 1.25}
    with sessions() as session:
        counters = session.scalars(select(LoadWindow.counters).order_by(LoadWindow.window_index)).all()
        assert [c["dropped_tokens"] for c in counters] == [0, 17]


def test_a_new_agents_first_window_counts_it_fresh_but_not_as_load(client, sessions, clock, registered):
    client.app.state.settings = client.app.state.settings.model_copy(update={"warmup_windows": 1})
    assert post(client, good(clock)).status_code == 200
    assert stored(sessions) == (0, 1)  # the agent is known and fresh; its partial first window is dropped
    clock.now += 10
    assert post(client, good(clock)).status_code == 200
    assert stored(sessions) == (1, 1)
