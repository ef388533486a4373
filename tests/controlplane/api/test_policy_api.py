"""Policy versions, concurrent edits, revert, and who may change what."""

from __future__ import annotations

import subprocess
import sys

import pytest
from support.auth import operator

MODEL = {"name": "tiny", "num_layers": 2, "num_experts": 8, "num_groups": 2, "top_k": 2}


def token(client, role: str, name: str | None = None) -> dict:
    response = client.post("/v1/tokens", json={"name": name or role, "role": role}, headers=operator())
    assert response.status_code == 201, response.text
    return {"Authorization": f"Bearer {response.json()['token']}"}


@pytest.fixture
def deployment(client):
    assert client.put("/v1/deployments/tiny", json={"model": MODEL}, headers=operator()).status_code == 200


def test_every_change_is_kept_with_its_author_and_can_be_reverted(client, deployment):
    alice = token(client, "admin", "alice")
    read = client.get("/v1/deployments/tiny/policy")
    assert read.headers["ETag"] == '"1"'
    changed = client.put("/v1/deployments/tiny/policy", json={"mode": "auto", "imbalance_threshold": 1.4},
                         headers=alice | {"If-Match": read.headers["ETag"]})
    assert changed.status_code == 200 and changed.json()["version"] == 2
    versions = client.get("/v1/deployments/tiny/policy/versions").json()
    assert [(v["version"], v["created_by"]) for v in versions] == [(2, "alice"), (1, "bootstrap-admin")]
    assert client.get("/v1/deployments/tiny/policy/versions/1").json()["policy"]["mode"] == "observe"
    reverted = client.post("/v1/deployments/tiny/policy/revert", json={"version": 1}, headers=alice)
    assert reverted.json()["version"] == 3 and reverted.json()["note"] == "revert to v1"
    current = client.get("/v1/deployments/tiny/policy").json()
    assert current["policy"]["mode"] == "observe" and current["policy"]["imbalance_threshold"] == 1.15


def test_a_stale_if_match_is_refused_and_changes_nothing(client, deployment):
    first = client.put("/v1/deployments/tiny/policy", json={"mode": "auto"}, headers=operator() | {"If-Match": '"1"'})
    assert first.status_code == 200
    second = client.put("/v1/deployments/tiny/policy", json={"mode": "off"}, headers=operator() | {"If-Match": '"1"'})
    assert second.status_code == 412 and "changed since you read it" in second.json()["detail"]
    assert client.get("/v1/deployments/tiny/policy").json()["policy"]["mode"] == "auto"


@pytest.mark.parametrize("body, field", [
    ({"topk_group_min": 4, "topk_group_max": 2}, "topk_group_min 4 exceeds topk_group_max 2"),
    ({"replicas": {"decode": {"min": 5, "max": 2}}}, "replicas.decode"),
    ({"replicas": {"router": {"min": 1, "max": 2}}}, "unknown pool role"),
    ({"mtp_acceptance_floor": 1.5}, "mtp_acceptance_floor"),
    ({"cooldown_seconds": -1}, "cooldown_seconds"),
    ({"surprise": 1}, "surprise"),
])
def test_invalid_policies_name_the_field(client, deployment, body, field):
    response = client.put("/v1/deployments/tiny/policy", json=body, headers=operator())
    assert response.status_code == 422 and field in response.json()["detail"], response.text
    assert client.get("/v1/deployments/tiny/policy").json()["version"] == 1


def test_roles(client, deployment):
    viewer, agent, alerts, op = (token(client, r) for r in ("viewer", "agent", "alerts", "operator"))
    assert client.put("/v1/deployments/tiny/policy", json={}, headers=viewer).status_code == 403
    assert client.put("/v1/deployments/tiny/policy", json={}, headers=op).status_code == 403  # policies: admin
    assert client.post("/v1/deployments/tiny/rebalance", json={"dry_run": True}, headers=viewer).status_code == 403
    assert client.post("/v1/tokens", json={"name": "x", "role": "admin"}, headers=op).status_code == 403
    empty = {"version": "4", "alerts": []}
    assert client.post("/v1/alerts/alertmanager", json=empty, headers=agent).status_code == 403
    assert client.post("/v1/alerts/alertmanager", json=empty, headers=alerts).status_code == 200
    client.delete("/v1/tokens/viewer", headers=operator())
    assert client.get("/v1/tokens", headers=viewer).status_code == 401  # revoked
    listed = client.get("/v1/tokens", headers=operator()).json()
    assert {t["name"] for t in listed} == {"viewer", "agent", "alerts", "operator"}
    assert all("token" not in t and t["prefix"].startswith("moectl_") for t in listed)


def test_token_cli_stores_only_a_hash(settings, sessions):
    result = subprocess.run([sys.executable, "-m", "controlplane", "token", "create", "--name", "ci", "--role",
                             "operator", "--database-url", settings.database_url], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    secret = result.stdout.strip().splitlines()[-1]
    from controlplane.store import tokens

    with sessions() as session:
        stored = tokens.lookup(session, secret)
        assert stored.role == "operator" and stored.secret_sha256 != secret and secret not in str(stored.__dict__)
