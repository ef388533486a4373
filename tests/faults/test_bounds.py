"""Values past what the columns, the floats or the sums can hold get a 4xx naming the field, never a 500,
and nothing is stored from them: on SQLite and PostgreSQL. Before every field was bounded, each was a 500
or was stored (as sent, wrapped, or infinite)."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
from support.auth import agent, operator
from support.store import MODEL, make_pool, register, snapshot, stored

from agents.protocol import Array
from controlplane.collect.aggregate import to_report
from controlplane.store import windows
from controlplane.store.windows import WindowOverflow

BIG = 10**400  # JSON has no limit on integers; Python parses this exactly, a float column cannot hold it


def snapshot_body(clock, rank: int = 0, **fields) -> dict:
    body = snapshot(window_start=clock.now - 10, rank=rank).model_dump(mode="json")
    identity = fields.pop("identity", {})
    return body | {"identity": body["identity"] | identity} | fields


def with_tokens(clock, rank: int, value: int) -> dict:
    raw = np.full((MODEL.num_layers, MODEL.num_experts), value, np.int64)
    return snapshot_body(clock, rank) | {"expert_tokens": Array.from_numpy(raw).model_dump()}


# name: (what to post, per rank), the field the answer must name
SNAPSHOTS = {
    "node over 256": (lambda c, r: snapshot_body(c, r, identity={"node": "n" * 300}), "node"),
    "gpu_uuid over 128": (lambda c, r: snapshot_body(c, r, identity={"gpu_uuid": "g" * 200}), "gpu_uuid"),
    "gpus_per_node 2^31": (lambda c, r: snapshot_body(c, r, identity={"gpus_per_node": 2**31}), "gpus_per_node"),
    "NUL in instance": (lambda c, r: snapshot_body(c, r, identity={"instance": "i\x000"}), "instance"),
    "NUL in node": (lambda c, r: snapshot_body(c, r, identity={"node": "node\x00"}), "node"),
    "forward_seconds 1.7e308": (lambda c, r: snapshot_body(c, r, forward_seconds=1.7e308), "forward_seconds"),
    "ttft sum 1e308": (lambda c, r: snapshot_body(c, r, ttft={"count": 1, "sum": 1e308}), "ttft.sum"),
    "expert_tokens 2^62": (lambda c, r: with_tokens(c, r, 2**62), "expert_tokens"),
    "num_steps 10^400": (lambda c, r: snapshot_body(c, r, num_steps=BIG), "num_steps"),
    "requests_waiting 10^400": (lambda c, r: snapshot_body(c, r, requests_waiting=BIG), "requests_waiting"),
    "ttft count 10^400": (lambda c, r: snapshot_body(c, r, ttft={"count": BIG}), "ttft.count"),
    "accepted by position 10^400": (lambda c, r: snapshot_body(c, r, spec_accepted_by_position=[BIG]),
                                    "spec_accepted_by_position"),
    "groups per token 10^400": (lambda c, r: snapshot_body(c, r, routing_groups_per_token=[0, BIG]),
                                "routing_groups_per_token"),
    "placement_version 2^31": (lambda c, r: snapshot_body(c, r, placement_version=2**31), "placement_version"),
    "model name with NUL": (lambda c, r: snapshot_body(c, r, model={**MODEL.model_dump(), "name": "t\x00"}),
                            "name"),
}

# policy fields, as raw JSON text: `Infinity`, `NaN` and 1e400 are what Python's JSON parser reads as floats
POLICIES = {
    "cooldown Infinity": ('{"cooldown_seconds": Infinity}', "cooldown_seconds"),
    "cooldown 1e400": ('{"cooldown_seconds": 1e400}', "cooldown_seconds"),
    "threshold NaN": ('{"imbalance_threshold": NaN}', "imbalance_threshold"),
    "tolerance -Infinity": ('{"rollback_tolerance": -Infinity}', "rollback_tolerance"),
    "min_gain 1e308": ('{"min_gain": 1e308}', "min_gain"),
    "gain per moved slot 2": ('{"min_gain_per_moved_slot": 2}', "min_gain_per_moved_slot"),
    "actions per hour 10^400": (f'{{"max_actions_per_hour": {BIG}}}', "max_actions_per_hour"),
    "gpu budget 10^400": (f'{{"gpu_budget": {BIG}}}', "gpu_budget"),
    "replicas 10^400": (f'{{"replicas": {{"decode": {{"max": {BIG}}}}}}}', "replicas"),
    "moves per hour Infinity": ('{"max_moved_slots_per_hour_fraction": Infinity}', "max_moved_slots_per_hour"),
    "slo NaN": ('{"slo": {"ttft_p90_seconds": NaN}}', "slo.ttft_p90_seconds"),
}

PATHS = {
    "NUL in a web path": ("GET", "/web/%00"),
    "NUL in a pool role": ("GET", "/v1/deployments/tiny/pools/%00/load"),
    "NUL in a pool size's role": ("GET", "/v1/deployments/tiny/pools/%00/size"),
    "NUL in a token name": ("DELETE", "/v1/tokens/%00"),
    "NUL in an alerts filter": ("GET", "/v1/alerts?deployment=%00"),
    "NUL in a deep web path": ("GET", "/web/vendor/%00.js"),
}


@pytest.fixture
def registered(client):
    register(client)


@pytest.mark.parametrize("case", list(SNAPSHOTS))
def test_unbounded_snapshot_fields_are_refused(case, client, sessions, clock, registered):
    make, field = SNAPSHOTS[case]
    for rank in (0, 1):  # two ranks of one window: a sum of two would overflow where one does not
        response = client.post("/v1/agents/snapshot", content=json.dumps(make(clock, rank)),
                               headers=agent() | {"Content-Type": "application/json"})
        assert response.status_code == 422, response.text
        assert field in response.json()["detail"], response.json()["detail"]
    assert stored(sessions) == (0, 0)


@pytest.mark.parametrize("case", list(POLICIES))
def test_unbounded_policy_fields_are_refused(case, client, registered):
    body, field = POLICIES[case]
    response = client.put("/v1/deployments/tiny/policy", content=body,
                          headers=operator() | {"Content-Type": "application/json"})
    assert response.status_code == 422, response.text
    assert field in response.json()["detail"]
    assert client.get("/v1/deployments/tiny/policy").json()["version"] == 1


@pytest.mark.parametrize("case", list(PATHS))
def test_nul_bytes_in_paths_are_not_found_or_invalid(case, client, registered):
    method, path = PATHS[case]
    response = client.request(method, path, headers=operator())
    assert response.status_code in (404, 422), (response.status_code, response.text)


def test_a_window_sum_that_would_wrap_is_refused_not_stored_negative(sessions, clock):
    """The wire bounds each count (2^40), so a sum wraps only past 2^23 reports of one window; the store
    still checks, and refuses the report that would wrap instead of storing a negative count."""
    with sessions() as session, session.begin():
        deployment, pool = make_pool(session, now=clock.now)
    report = to_report(snapshot(window_start=clock.now - 10), 10.0)
    near_max = dataclasses.replace(report, expert_tokens=np.full_like(report.expert_tokens, 2**62))
    empty = (np.zeros_like(report.expert_tokens), np.zeros((2, 10), np.int64))
    with sessions() as session, session.begin():
        windows.add_report(session, pool=pool, report=near_max, current_version=0,
                           grid_seconds=10.0, empty=empty)
    with pytest.raises(WindowOverflow, match="expert_tokens"), sessions() as session, session.begin():
        windows.add_report(session, pool=pool, report=near_max, current_version=0,
                           grid_seconds=10.0, empty=empty)
    with sessions() as session:
        [stored_window] = windows.recent(session, pool, before_index=report.window_index + 1, limit=1)
    assert stored_window.expert_tokens.min() == 2**62 and stored_window.num_reports == 1
