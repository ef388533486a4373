"""Alert-triggered rebalance end to end with the real Debian binaries on loopback:

sim workers (the real agent over a simulated engine) -> Prometheus scrapes /metrics and evaluates our
rules -> the imbalance alert fires -> Alertmanager posts to the controller -> the controller rebalances
-> the agents apply it -> the imbalance falls -> the alert resolves and the controller hears it.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from support.servers import free_port, require_binary, until, wait_http

from controlplane.cmd.serve import Controller
from controlplane.config import Settings

RULES = Path(__file__).resolve().parents[3] / "dashboards" / "prometheus" / "moectl-rules.yml"
API, AGENT, ALERTS = "e2e-admin", "e2e-agent", "e2e-alerts"


def fast_rules(path: Path) -> None:
    """Our rules with time compressed (rate windows 5s, for: 3s), so a test sees the whole life of an alert."""
    text = RULES.read_text()
    text = re.sub(r"\[(1m|5m|1h)\]", "[5s]", text).replace("offset 10m", "offset 5s")
    path.write_text(re.sub(r"for: \d+m", "for: 3s", text))


@pytest.mark.slow
def test_imbalance_alert_triggers_a_rebalance_that_resolves_it(tmp_path):
    prometheus = require_binary("prometheus", "prometheus")
    alertmanager = require_binary("prometheus-alertmanager", "prometheus-alertmanager")
    processes: list[subprocess.Popen] = []
    settings = Settings(database_url=f"sqlite:///{tmp_path / 'c.db'}", port=free_port(), api_token=API,
                        agent_token=AGENT, alerts_token=ALERTS, window_seconds=1.0, reconcile_seconds=1.0)
    controller = Controller(settings)
    controller.start()
    api = httpx.Client(base_url=controller.url, headers={"Authorization": f"Bearer {API}"}, timeout=10)
    try:
        worker_ports = [free_port() for _ in range(4)]
        env = os.environ | {"OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
        processes.append(subprocess.Popen(
            [sys.executable, "-m", "agents.worker", "--sim", "--deployment", "hot", "--role", "decode",
             "--ep-size", "4", "--slots-per-rank", "10", "--ports", ",".join(map(str, worker_ports)),
             "--controller", controller.url, "--agent-token", AGENT, "--api-token", API, "--mode", "off",
             "--window-seconds", "1"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        until("the workers to register", lambda: api.get("/v1/deployments/hot/overview").status_code == 200, 60)
        # the loop itself would rebalance first: leave it to the alert
        api.put("/v1/deployments/hot/policy", json={"mode": "auto", "imbalance_threshold": 100,
                                                    "cooldown_seconds": 0, "change_price_margin": 0}).raise_for_status()

        am_port, prom_port = free_port(), free_port()
        (tmp_path / "am.yml").write_text(f"""
route: {{receiver: moectl, group_by: [deployment], group_wait: 1s, group_interval: 2s, repeat_interval: 1h}}
receivers:
  - name: moectl
    webhook_configs:
      - url: {controller.url}/v1/alerts/alertmanager
        send_resolved: true
        http_config: {{authorization: {{credentials: {ALERTS}}}}}
""")
        processes.append(subprocess.Popen(
            [alertmanager, f"--config.file={tmp_path / 'am.yml'}", f"--storage.path={tmp_path / 'am'}",
             f"--web.listen-address=127.0.0.1:{am_port}", "--cluster.listen-address="],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        fast_rules(tmp_path / "rules.yml")
        targets = ", ".join(f"'127.0.0.1:{p}'" for p in worker_ports)
        (tmp_path / "prom.yml").write_text(f"""
global: {{scrape_interval: 1s, evaluation_interval: 1s}}
rule_files: ['{tmp_path / "rules.yml"}']
alerting: {{alertmanagers: [{{static_configs: [{{targets: ['127.0.0.1:{am_port}']}}]}}]}}
scrape_configs: [{{job_name: moectl, static_configs: [{{targets: [{targets}]}}]}}]
""")
        processes.append(subprocess.Popen(
            [prometheus, f"--config.file={tmp_path / 'prom.yml'}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
             f"--web.listen-address=127.0.0.1:{prom_port}"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        wait_http(f"http://127.0.0.1:{prom_port}/-/ready")
        wait_http(f"http://127.0.0.1:{am_port}/-/ready")

        def prom_alerts() -> list[dict]:
            body = httpx.get(f"http://127.0.0.1:{prom_port}/api/v1/alerts").json()
            return [a for a in body["data"]["alerts"] if a["labels"]["alertname"] == "MoectlExpertImbalanceHigh"]

        def imbalance() -> float | None:
            query = 'deployment_role:moectl_expert_gpu_load_max_to_mean:ratio_avg1m{deployment="hot"}'
            result = httpx.get(f"http://127.0.0.1:{prom_port}/api/v1/query", params={"query": query}).json()
            samples = result["data"]["result"]
            return float(samples[0]["value"][1]) if samples else None

        # the value the alert fired at: read later, the query may already average in the rebalance's windows
        firing = until("the imbalance alert to fire", lambda: [a for a in prom_alerts() if a["state"] == "firing"], 60)
        assert float(firing[0]["value"]) > 1.3

        def alert_action():
            return [a for a in api.get("/v1/deployments/hot/actions").json() if a["trigger"] == "alert"]

        [action] = until("the controller to act on the alert", alert_action, 30)
        assert action["status"] in ("applied", "verified") and action["alerts"][0]["alertname"] == \
            "MoectlExpertImbalanceHigh"
        until("the agents to run the new placement", lambda: api.get("/v1/deployments/hot/overview").json()[
            "placement_version"].get("decode", 0) >= action["placement_version"], 30)  # a new firing may move it on
        until("the imbalance to fall under the alert's threshold", lambda: (imbalance() or 9) < 1.2, 30)
        until("the alert to resolve in Prometheus", lambda: not prom_alerts(), 30)
        events = until("Alertmanager to tell the controller it resolved", lambda: [
            e for e in api.get("/v1/alerts", params={"deployment": "hot"}).json() if e["status"] == "resolved"], 30)
        assert events[0]["outcome"] == "resolved"
        # one alert, one action, however many notifications. A firing is (fingerprint, startsAt): with windows
        # of 5 s a loaded machine's scrape gap can end the alert and start it again (a new firing), which
        # may ask again, so the count is per firing
        acted = alert_action()
        firings = [{(n["fingerprint"], n["startsAt"]) for n in a["alerts"]} for a in acted]
        shown = [(a["id"], a["status"], a["created_at"], a["reason"], a["alerts"]) for a in acted]
        assert len(set().union(*firings)) == sum(map(len, firings)), shown  # no firing led to two actions
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
        api.close()
        controller.stop()
