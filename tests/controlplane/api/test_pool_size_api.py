"""A person's pool size: checked against the policy's replica bounds and GPU budget (dry run included), then
one action per change under the policy's mode and the one-in-flight rule, and resuming moectl after it
stood down from a pool another writer scales."""

from __future__ import annotations

import pytest
from sqlalchemy import func, select
from support.auth import operator
from support.store import make_pool

from controlplane.desired import Policy
from controlplane.store import actions, deployments
from controlplane.store.knobs import POOL_SIZE
from controlplane.store.tables import Request

DECODE = "/v1/deployments/tiny/pools/decode/size"
# decode and prefill instances use 2 GPUs each (EP size 2); 12 GPUs in all
POLICY = {"replicas": {"decode": {"min": 1, "max": 4}, "prefill": {"min": 1, "max": 4}}, "gpu_budget": 12,
          "cooldown_seconds": 60}


def setup(sessions, clock, **policy) -> None:
    with sessions() as session, session.begin():
        for role in ("decode", "prefill"):
            make_pool(session, now=clock.now, role=role, policy=Policy.model_validate(POLICY | policy))


def num_requests(sessions) -> int:
    with sessions() as session:
        return session.scalar(select(func.count()).select_from(Request))


def ask(client, replicas: int, **body):
    return client.post(DECODE, json={"replicas": replicas} | body, headers=operator())


def test_a_dry_run_checks_and_records_nothing(client, sessions, clock):
    setup(sessions, clock, mode="auto")
    answer = ask(client, 3, dry_run=True)
    assert answer.status_code == 200, answer.text
    assert answer.json() | {"reason": ""} == {"role": "decode", "replicas": 3, "current": None, "decision": "resize",
                                              "reason": "", "request_id": None, "action": None}
    refused = ask(client, 9, dry_run=True).json()
    assert refused["decision"] == "refused" and "outside the policy's bounds for decode: min 1, max 4" in \
        refused["reason"]
    assert num_requests(sessions) == 0 and client.get(DECODE).json()["version"] == 0


@pytest.mark.parametrize("replicas, problem", [(0, "min 1, max 4"), (5, "min 1, max 4")])
def test_outside_the_bounds_is_refused_and_nothing_recorded(client, sessions, clock, replicas, problem):
    setup(sessions, clock, mode="auto")
    answer = ask(client, replicas)
    assert answer.status_code == 409 and problem in answer.json()["detail"]
    assert num_requests(sessions) == 0


def test_the_gpu_budget_counts_the_other_pools(client, sessions, clock):
    setup(sessions, clock, mode="auto")
    assert client.post("/v1/deployments/tiny/pools/prefill/size", json={"replicas": 4},
                       headers=operator()).status_code == 200  # 8 GPUs
    assert ask(client, 2).status_code == 200  # 4 more: 12, the whole budget
    over = client.post(DECODE, json={"replicas": 3}, headers=operator())
    assert over.status_code == 409
    assert "3 replicas x 2 GPUs + 8 GPUs of the other pools = 14 GPUs, over the policy's gpu_budget 12" in \
        over.json()["detail"]


def test_auto_applies_a_new_version_made_by_the_action(client, sessions, clock):
    setup(sessions, clock, mode="auto")
    answer = ask(client, 3, note="traffic peak")
    assert answer.status_code == 200, answer.text
    action = answer.json()["action"]
    assert answer.json()["decision"] == "resize" and action["kind"] == "pool_size" and action["status"] == "applied"
    assert action["predicted"] == {"replicas_before": None, "replicas_after": 3}
    assert action["created_by"] == "bootstrap-admin" and action["trigger"] == "manual"
    assert "asked by bootstrap-admin" in action["reason"] and "(traffic peak)" in action["reason"]
    view = client.get(DECODE).json()
    assert (view["replicas"], view["version"], view["action_id"], view["standing_down"]) == (3, 1, action["id"], None)
    assert client.get("/v1/deployments/tiny/actions").json()[0]["id"] == action["id"]


def test_approve_waits_for_a_person_and_one_size_at_a_time(client, sessions, clock):
    setup(sessions, clock, mode="approve")
    first = ask(client, 3).json()
    assert first["action"]["status"] == "awaiting_approval" and client.get(DECODE).json()["replicas"] is None
    joined = ask(client, 3).json()
    assert joined["action"]["id"] == first["action"]["id"] and joined["reason"].startswith("joined action")
    other = ask(client, 2)
    assert other.status_code == 409 and f"action {first['action']['id']} (awaiting_approval, 3 replicas) is in " \
                                        f"flight" in other.json()["detail"]
    assert num_requests(sessions) == 3  # the refused ask stays in the audit trail
    approved = client.post(f"/v1/actions/{first['action']['id']}/approve", headers=operator()).json()
    assert approved["status"] == "applied" and client.get(DECODE).json()["replicas"] == 3


def test_observe_records_the_plan_only_and_the_same_size_is_kept(client, sessions, clock):
    setup(sessions, clock, mode="observe")
    assert ask(client, 3).json()["action"]["status"] == "planned"
    assert client.get(DECODE).json()["replicas"] is None
    setup_auto = client.put("/v1/deployments/tiny/policy", json=POLICY | {"mode": "auto", "cooldown_seconds": 0},
                            headers=operator())
    assert setup_auto.status_code == 200
    joined = ask(client, 3).json()  # the plan is in flight for a window at least
    assert joined["action"]["status"] == "planned" and joined["reason"].startswith("joined")
    clock.now += 11
    assert ask(client, 3).json()["action"]["status"] == "applied"
    clock.now += 11
    kept = ask(client, 3).json()
    assert kept["decision"] == "keep" and kept["action"] is None and "already runs 3" in kept["reason"]


def test_mode_off_unknown_pools_and_roles_are_refused(client, sessions, clock):
    setup(sessions, clock, mode="off")
    assert ask(client, 2).status_code == 409 and "mode is off" in ask(client, 2).json()["detail"]
    assert client.post("/v1/deployments/tiny/pools/unified/size", json={"replicas": 1},
                       headers=operator()).status_code == 404
    assert client.post(DECODE, json={"replicas": 1}).status_code == 401
    assert client.post(DECODE, json={"replicas": -1}, headers=operator()).status_code == 422
    assert client.post(DECODE, json={"replica": 1}, headers=operator()).status_code == 422


def test_resume_is_audited_and_only_while_standing_down(client, sessions, clock):
    setup(sessions, clock, mode="auto")
    assert client.post(f"{DECODE}/resume", headers=operator()).status_code == 409
    with sessions() as session, session.begin():
        deployment = deployments.get(session, "tiny")
        pool = deployments.get_pool(session, deployment, "decode")
        conflict = actions.record(session, pool, actions.Entry("an HPA scales it",
                                                               inputs={"writer": "HorizontalPodAutoscaler x/y"}),
                                  kind=POOL_SIZE.kind, mode="auto", status=actions.CONFLICT, now=clock.now)
        conflict_id = conflict.id
    assert client.get(DECODE).json()["standing_down"]["id"] == conflict_id
    refused = ask(client, 2)
    assert refused.status_code == 409 and f"stands down from this pool (action {conflict_id})" in \
        refused.json()["detail"]
    clock.now += 5
    resumed = client.post(f"{DECODE}/resume", headers=operator()).json()
    assert resumed["id"] == conflict_id and resumed["status"] == "resumed"
    assert resumed["measured"] == {"resumed_by": "bootstrap-admin", "resumed_at": clock.now}
    assert client.get(DECODE).json()["standing_down"] is None
    assert ask(client, 2).json()["action"]["status"] == "applied"
    with sessions() as session:
        assert POOL_SIZE.versions.latest(session, pool).value == 2
