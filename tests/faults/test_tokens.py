"""Token names the controller records as authors are reserved (nobody can sign as the loop), a revoked
token's name can be given to a new token, and `moectl serve` prints only the tokens it generated."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from support.auth import operator
from support.servers import free_port


@pytest.mark.parametrize("name", ["loop", "anonymous", "bootstrap-admin", "bootstrap-agent", "bootstrap-alerts",
                                  "bootstrap-anything"])
def test_names_the_controller_records_are_reserved(client, name):
    response = client.post("/v1/tokens", json={"name": name, "role": "admin"}, headers=operator())
    assert response.status_code == 422 and "reserved" in response.json()["detail"], response.text
    assert client.get("/v1/tokens", headers=operator()).json() == []


def test_a_revoked_name_can_be_reused_and_the_old_token_stays_revoked(client):
    first = client.post("/v1/tokens", json={"name": "alice", "role": "operator"}, headers=operator()).json()
    taken = client.post("/v1/tokens", json={"name": "alice", "role": "viewer"}, headers=operator())
    assert taken.status_code == 409 and "exists" in taken.json()["detail"]
    assert client.delete("/v1/tokens/alice", headers=operator()).status_code == 204
    second = client.post("/v1/tokens", json={"name": "alice", "role": "viewer"}, headers=operator())
    assert second.status_code == 201, second.text
    assert client.get("/v1/whoami", headers={"Authorization": f"Bearer {first['token']}"}).status_code == 401
    me = client.get("/v1/whoami", headers={"Authorization": f"Bearer {second.json()['token']}"}).json()
    assert me == {"name": "alice", "role": "viewer"}
    listed = [(t["name"], t["role"], t["revoked_at"] is not None) for t in
              client.get("/v1/tokens", headers=operator()).json()]
    assert sorted(listed) == [("alice", "operator", True), ("alice", "viewer", False)]
    assert client.delete("/v1/tokens/alice", headers=operator()).status_code == 204
    assert client.delete("/v1/tokens/alice", headers=operator()).status_code == 404


@pytest.mark.slow
def test_serve_prints_only_the_tokens_it_generated(tmp_path):
    env = os.environ | {"MOECTL_API_TOKEN": "from-the-environment-1234", "MOECTL_AGENT_TOKEN": "",
                        "MOECTL_DATABASE_URL": f"sqlite:///{tmp_path / 'c.db'}", "MOECTL_PORT": str(free_port()),
                        "PYTHONUNBUFFERED": "1"}
    process = subprocess.Popen([sys.executable, "-m", "controlplane", "serve", "--no-loop"], env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines = []
    try:
        for line in process.stdout:
            lines.append(line.strip())
            if line.startswith("agent token"):
                break
    finally:
        process.terminate()
        process.wait(timeout=30)
    printed = "\n".join(lines)
    assert "from-the-environment-1234" not in printed, printed
    assert "api token: (MOECTL_API_TOKEN)" in printed, printed
    agent_line = next(line for line in lines if line.startswith("agent token: "))
    assert len(agent_line.removeprefix("agent token: ")) >= 24, printed  # generated: shown once, here
