"""A deployment's engine as the controller knows it (controlplane/plan/engines.py): registered with the deployment,
shown in its overview and `moectl status`, and the planner's rails tightened for an engine that restarts per
change (SGLang: at most MAX_RESTARTS_PER_HOUR, MIN_RESTART_SECONDS apart), while the policy's own tighter rails
stand."""

from __future__ import annotations

from support.auth import operator
from support.store import MODEL

from controlplane.cmd.status import render
from controlplane.desired import Policy
from controlplane.plan.engines import MAX_RESTARTS_PER_HOUR, MIN_RESTART_SECONDS, engine_policy


def test_sglang_changes_are_paced_as_restarts_and_counted_against_the_hourly_cap():
    policy = engine_policy(Policy(cooldown_seconds=30, max_actions_per_hour=60), "sglang")
    assert policy.cooldown_seconds == MIN_RESTART_SECONDS
    assert policy.max_actions_per_hour == MAX_RESTARTS_PER_HOUR
    assert policy.max_moved_slots_fraction == 1.0  # a restart reloads every weight: the moves are not the cost


def test_a_tighter_policy_stands_and_bundled_is_unchanged():
    strict = Policy(cooldown_seconds=7200, max_actions_per_hour=1)
    assert engine_policy(strict, "sglang").cooldown_seconds == 7200
    assert engine_policy(strict, "sglang").max_actions_per_hour == 1
    assert engine_policy(Policy(), "bundled") == Policy()
    assert engine_policy(Policy(cooldown_seconds=1), "vllm").cooldown_seconds > 1  # vLLM's rearrange interval


def test_the_engine_is_registered_and_shown(client):
    body = {"model": MODEL.model_dump(), "engine": "sglang"}
    assert client.put("/v1/deployments/steered", json=body, headers=operator()).status_code == 200
    overview = client.get("/v1/deployments/steered/overview", headers=operator()).json()
    assert overview["engine"] == "sglang" and overview["engine_applies"].startswith("restart per change")
    assert "  engine: sglang (restart per change" in render([overview])
    plain = client.put("/v1/deployments/tiny", json={"model": MODEL.model_dump()}, headers=operator())
    assert plain.status_code == 200
    assert client.get("/v1/deployments/tiny/overview", headers=operator()).json()["engine"] == "bundled"


def test_an_unknown_engine_is_refused(client):
    body = {"model": MODEL.model_dump(), "engine": "trtllm"}
    answer = client.put("/v1/deployments/steered", json=body, headers=operator())
    assert answer.status_code == 422 and "engine" in answer.text


def test_a_re_registration_with_another_engine_is_409_naming_the_way_to_change_it(client):
    """Old code: 200 `created: false`, the engine dropped silently (a bundled deployment kept bundled rails)."""
    body = {"model": MODEL.model_dump(), "engine": "bundled"}
    assert client.put("/v1/deployments/steered", json=body, headers=operator()).status_code == 200
    again = client.put("/v1/deployments/steered", json=body | {"engine": "sglang"}, headers=operator())
    assert again.status_code == 409 and "PUT /v1/deployments/steered/engine" in again.json()["detail"]
    same = client.put("/v1/deployments/steered", json=body, headers=operator())
    assert same.status_code == 200 and same.json()["created"] is False


def test_the_engine_is_changed_explicitly_by_an_admin_and_audited(client):
    body = {"model": MODEL.model_dump(), "engine": "bundled"}
    assert client.put("/v1/deployments/steered", json=body, headers=operator()).status_code == 200
    change = {"engine": "sglang", "reason": "moved to SGLang sidecars"}
    assert client.put("/v1/deployments/steered/engine", json=change).status_code == 401
    answer = client.put("/v1/deployments/steered/engine", json=change, headers=operator())
    assert answer.status_code == 200 and answer.json() == {"name": "steered", "engine": "sglang",
                                                           "previous": "bundled", "changed": True}
    assert client.get("/v1/deployments/steered/overview", headers=operator()).json()["engine"] == "sglang"
    (event,) = [e for e in client.get("/v1/audit", headers=operator()).json() if e["verb"] == "change_engine"]
    assert event["detail"] == {"from": "bundled", "to": "sglang", "reason": "moved to SGLang sidecars"}
    assert client.put("/v1/deployments/steered", json=body | {"engine": "sglang"},
                      headers=operator()).status_code == 200  # its sidecars register now
    assert client.put("/v1/deployments/nobody/engine", json=change, headers=operator()).status_code == 404
    assert client.put("/v1/deployments/steered/engine", json={"engine": "trt"}, headers=operator()).status_code == 422
