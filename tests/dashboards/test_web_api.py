"""What the dashboard needs from the controller besides the read API: who the caller is, and its files
(subfolders included) without a way out of dashboards/web."""

from __future__ import annotations

import pytest
from fastapi import HTTPException
from support.auth import AGENT_TOKEN, agent, operator

from controlplane.api.routes import health


def test_whoami_names_the_caller_and_role(client):
    assert client.get("/v1/whoami").json() == {"name": "anonymous", "role": "viewer"}
    assert client.get("/v1/whoami", headers=operator()).json() == {"name": "bootstrap-admin", "role": "admin"}
    assert client.get("/v1/whoami", headers=agent()).json() == {"name": "bootstrap-agent", "role": "agent"}
    for role in ("viewer", "operator"):
        secret = client.post("/v1/tokens", json={"name": f"a-{role}", "role": role}, headers=operator()).json()["token"]
        answer = client.get("/v1/whoami", headers={"Authorization": f"Bearer {secret}"})
        assert answer.json() == {"name": f"a-{role}", "role": role}
    refused = client.get("/v1/whoami", headers={"Authorization": f"Bearer not-{AGENT_TOKEN}"})
    assert refused.status_code == 401 and "unknown or revoked token" in refused.json()["detail"]


def test_whoami_needs_a_token_when_reads_are_closed(client):
    client.app.state.settings = client.app.state.settings.model_copy(update={"anonymous_read": False})
    assert client.get("/v1/whoami").status_code == 401


def test_the_dashboard_and_its_vendored_files_are_served(client):
    page = client.get("/")
    assert page.status_code == 200 and "moectl dashboard" in page.text and "/web/app.js" in page.text
    module = client.get("/web/app.js")
    assert module.status_code == 200 and "javascript" in module.headers["content-type"]
    assert module.headers["cache-control"] == "no-cache"
    vendored = client.get("/web/vendor/uplot-1.6.32/uPlot.esm.js")
    assert vendored.status_code == 200 and "export { uPlot as default }" in vendored.text
    assert client.get("/web/vendor/uplot-1.6.32/uPlot.min.css").headers["content-type"].startswith("text/css")
    assert client.get("/web/nothing.js").status_code == 404
    assert client.get("/web/vendor").status_code == 404  # a folder is not a file


@pytest.mark.parametrize("name", ["../../pyproject.toml", "vendor/../../../pyproject.toml", "/etc/passwd",
                                  "%2e%2e/%2e%2e/pyproject.toml", ".", ""])
def test_no_path_leaves_the_web_folder(client, name):
    with pytest.raises(HTTPException) as refused:
        health._static(name)
    assert refused.value.status_code == 404
    assert client.get(f"/web/{name}").status_code == 404
