"""The chart renders what it promises: `helm lint` and `helm template` are clean for every ci values file, the
schema refuses unknown keys and bad values with a message, a managed pool has no replicas, the monitoring
objects carry the shipped rules and dashboards, and the Roles hold exactly the actuator's calls."""

from __future__ import annotations

import json
import subprocess
import textwrap
from pathlib import Path

import pytest
import yaml
from support.chart import CHART, CI_VALUES, RELEASE, helm_findings, one, render
from support.servers import require_binary

pytestmark = [pytest.mark.kube, pytest.mark.slow]
DASHBOARDS = Path(__file__).resolve().parents[2] / "dashboards"


def env_of(container: dict) -> dict[str, dict]:
    return {e["name"]: e for e in container["env"]}


@pytest.mark.parametrize("values", CI_VALUES, ids=lambda p: p.name)
def test_lint_and_template_are_clean(kube_cluster, values):
    linted = kube_cluster.run_helm("lint", str(CHART), "--strict", "-f", str(values))
    assert "1 chart(s) linted, 0 chart(s) failed" in linted.stdout
    assert helm_findings(linted.stdout + linted.stderr) == []

    rendered = kube_cluster.run_helm("template", RELEASE, str(CHART), "-f", str(values))
    assert helm_findings(rendered.stderr) == []
    objects = [doc for doc in yaml.safe_load_all(rendered.stdout) if doc]
    assert objects and all({"apiVersion", "kind", "metadata"} <= set(o) for o in objects)
    names = [(o["kind"], o["metadata"].get("namespace"), o["metadata"]["name"]) for o in objects]
    assert len(names) == len(set(names))
    for obj in objects:
        assert obj["metadata"]["labels"]["app.kubernetes.io/instance"] == RELEASE


@pytest.mark.parametrize("args, message", [
    (["--set", "bogus=1"], "additional properties 'bogus' not allowed"),
    (["--set", "controller.replica=2"], "additional properties 'replica' not allowed"),
    (["--set", "pools.decode.maxReplicas=4"], "additional properties 'maxReplicas' not allowed"),
    (["--set", "controller.settings.databaseUrl=sqlite://"], "additional properties 'databaseUrl' not allowed"),
    (["--set", "controller.replicas=0"], "/controller/replicas"),
    (["--set-string", "controller.replicas=two"], "/controller/replicas"),
    (["--set", "database.type=mysql"], "/database/type"),
    (["--set", "pools.decode.kind=DaemonSet"], "/pools/decode/kind"),
    (["--set-string", "controller.settings.windowSeconds=fast"], "/controller/settings/windowSeconds"),
    (["--set", "monitoring.serviceMonitor.interval=thirty"], "/monitoring/serviceMonitor/interval"),
    (["--set", "scaleTargets[0].deployment=llm", "--set", "scaleTargets[0].role=decode",
      "--set", "scaleTargets[0].kind=InferencePool", "--set", "scaleTargets[0].name=llm-decode"],
     "missing properties 'apiVersion', 'resource'"),  # a kind controlplane/kube_kinds.py does not know
    (["--set", "scaleTargets[0].deployment=llm", "--set", "scaleTargets[0].role=decode",
      "--set", "scaleTargets[0].kind=Deployment", "--set", "scaleTargets[0].name=Not_A_Name"],
     "/scaleTargets/0/name"),
])
def test_schema_refuses_unknown_keys_and_bad_values(kube_cluster, args, message):
    for command in (["lint", str(CHART)], ["template", RELEASE, str(CHART)]):
        done = kube_cluster.run_helm(*command, *args, check=False)
        assert done.returncode != 0
        assert message in done.stdout + done.stderr, done.stdout + done.stderr


@pytest.mark.parametrize("args, message", [
    (["--set", "controller.replicas=2"], "controller.replicas=2 (or leaderElection.enabled) runs leader election, "
                                         "which needs one database shared by every replica: set "
                                         "database.type=postgresql and database.postgresql.existingSecret"),
    (["--set", "leaderElection.enabled=true"], "runs leader election, which needs one database"),
    (["--set", "database.type=postgresql"], "database.type=postgresql needs database.postgresql.existingSecret"),
    (["--set", "pools.decode.enabled=true", "--set", "scaleTargets[0].deployment=tiny",
      "--set", "scaleTargets[0].role=decode", "--set", "scaleTargets[0].kind=Deployment",
      "--set", "scaleTargets[0].name=other"], "pool tiny/decode has two scale targets"),
])
def test_rules_across_keys_fail_with_a_message(kube_cluster, args, message):
    # a template `fail`: install and template stop with it (helm lint only reports it, as INFO)
    done = kube_cluster.run_helm("template", RELEASE, str(CHART), *args, check=False)
    assert done.returncode != 0
    assert message in done.stderr


def test_a_managed_pool_has_no_replicas_and_an_unmanaged_one_has_its_own(kube_cluster):
    objects = render(kube_cluster, "-f", str(CHART / "ci" / "pools-values.yaml"))
    decode, prefill = one(objects, "Deployment", "moectl-decode"), one(objects, "StatefulSet", "moectl-prefill")
    assert "replicas" not in decode["spec"]
    assert prefill["spec"]["replicas"] == 2
    assert prefill["spec"]["serviceName"] == one(objects, "Service", "moectl-prefill")["metadata"]["name"]

    [worker] = decode["spec"]["template"]["spec"]["containers"]
    assert worker["command"] == ["moectl"]
    assert worker["args"][:7] == ["worker", "--role=decode", "--deployment=tiny", "--instance=$(POD_NAME)",
                                  "--ep-size=2", "--host=0.0.0.0", "--ports=8700"]
    assert "--controller=http://moectl.default.svc:8600" in worker["args"]
    assert [p["containerPort"] for p in worker["ports"]] == [8700, 8701]
    env = env_of(worker)
    assert env["MOECTL_AGENT_TOKEN"]["valueFrom"]["secretKeyRef"] == {"name": "moectl-tokens", "key": "agent-token"}

    # the controller is told exactly the managed pools, the same list its Role grants
    [controller] = one(objects, "Deployment", "moectl")["spec"]["template"]["spec"]["containers"]
    targets = json.loads(env_of(controller)["MOECTL_KUBE_SCALE_TARGETS"]["value"])
    assert [(t["deployment"], t["role"], t["kind"], t["name"]) for t in targets] == [
        ("tiny", "decode", "Deployment", "moectl-decode"), ("big", "decode", "Pool", "big-decode")]


def test_pods_are_non_root_read_only_and_without_service_links(kube_cluster):
    objects = render(kube_cluster, "-f", str(CHART / "ci" / "pools-values.yaml"))
    pods = [o["spec"]["template"]["spec"] for o in objects if o["kind"] in ("Deployment", "StatefulSet")]
    assert len(pods) == 3
    for pod in pods:
        assert pod["securityContext"]["runAsNonRoot"] is True
        assert pod["enableServiceLinks"] is False  # else a Service named moectl injects MOECTL_PORT=tcp://...
        for container in pod["containers"]:
            assert container["securityContext"]["readOnlyRootFilesystem"] is True
            assert container["securityContext"]["allowPrivilegeEscalation"] is False
            assert {"name": "tmp", "mountPath": "/tmp"} in container["volumeMounts"]


def test_one_replica_on_sqlite_keeps_its_file_on_a_pvc(kube_cluster):
    objects = render(kube_cluster)
    controller = one(objects, "Deployment", "moectl")
    pod = controller["spec"]["template"]["spec"]
    assert controller["spec"]["strategy"]["type"] == "Recreate"
    assert pod["automountServiceAccountToken"] is False  # no pools, no Lease: it never calls the API
    [container] = pod["containers"]
    env = env_of(container)
    assert env["MOECTL_DATABASE_URL"]["value"] == "sqlite:////data/moectl.db"
    assert env["MOECTL_LEADER_ELECTION"]["value"] == "false"
    assert {"MOECTL_LEASE_NAME", "MOECTL_KUBE_SCALE_TARGETS"}.isdisjoint(env)
    assert {"name": "data", "persistentVolumeClaim": {"claimName": "moectl-data"}} in pod["volumes"]
    pvc = one(objects, "PersistentVolumeClaim", "moectl-data")
    assert pvc["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    assert [o["kind"] for o in objects if o["kind"] in ("Role", "RoleBinding", "Job")] == []
    assert set(one(objects, "Secret", "moectl-tokens")["data"]) == {"api-token", "agent-token", "alerts-token"}


def test_two_replicas_elect_a_leader_on_postgres_migrated_by_a_hook(kube_cluster):
    objects = render(kube_cluster, "-f", str(CHART / "ci" / "postgres-ha-values.yaml"))
    controller = one(objects, "Deployment", "moectl")
    assert controller["spec"]["replicas"] == 2
    assert controller["spec"]["strategy"]["type"] == "RollingUpdate"
    pod = controller["spec"]["template"]["spec"]
    assert pod["automountServiceAccountToken"] is True
    env = env_of(pod["containers"][0])
    assert env["MOECTL_DATABASE_URL"]["valueFrom"]["secretKeyRef"] == {"name": "moectl-database", "key": "url"}
    assert env["MOECTL_API_TOKEN"]["valueFrom"]["secretKeyRef"] == {"name": "moectl-bootstrap-tokens",
                                                                    "key": "api-token"}
    assert env["MOECTL_LEADER_ELECTION"]["value"] == "true"
    assert env["MOECTL_LEASE_NAME"]["value"] == "moectl-leader"
    assert env["MOECTL_LEASE_NAMESPACE"]["value"] == "default"
    assert env["MOECTL_POD_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    assert env["MOECTL_WINDOW_SECONDS"]["value"] == "10" and env["MOECTL_ANONYMOUS_READ"]["value"] == "false"
    # the user's Secret holds the tokens: the chart makes none, nor a PVC
    assert [o for o in objects if o["kind"] in ("Secret", "PersistentVolumeClaim")] == []

    job = one(objects, "Job", "moectl-migrate")
    assert job["metadata"]["annotations"]["helm.sh/hook"] == "pre-install,pre-upgrade"
    [migrate] = job["spec"]["template"]["spec"]["containers"]
    assert (migrate["command"], migrate["args"]) == (["moectl"], ["migrate", "up"])
    assert env_of(migrate)["MOECTL_DATABASE_URL"] == env["MOECTL_DATABASE_URL"]
    # a pre-install hook runs before the chart's ServiceAccount exists
    assert "serviceAccountName" not in job["spec"]["template"]["spec"]


def rules_of(role: dict) -> list[tuple]:
    return [(tuple(r["apiGroups"]), tuple(r["resources"]), tuple(r.get("resourceNames", ())), tuple(r["verbs"]))
            for r in role["rules"]]


def test_roles_hold_exactly_the_actuator_and_leader_election_calls(kube_cluster):
    objects = render(kube_cluster, "-f", str(CHART / "ci" / "pools-values.yaml"), "--set", "controller.replicas=2",
                     "--set", "database.type=postgresql", "--set", "database.postgresql.existingSecret=db",
                     "--set", "scaleTargets[1].deployment=llm", "--set", "scaleTargets[1].role=prefill",
                     "--set", "scaleTargets[1].kind=StatefulSet", "--set", "scaleTargets[1].name=llm-prefill",
                     "--set", "scaleTargets[1].namespace=serving")
    roles = {(o["metadata"]["namespace"], o["metadata"]["name"]): o for o in objects if o["kind"] == "Role"}
    assert set(roles) == {("default", "moectl-scaler"), ("serving", "moectl-scaler"), ("default", "moectl-leader")}
    events = [(("",), ("events",), (), ("create", "patch")), (("events.k8s.io",), ("events",), (), ("create", "patch"))]
    pool_rules = [(("autoscaling",), ("horizontalpodautoscalers",), (), ("list", "watch")),
                  (("",), ("pods",), (), ("get", "list", "patch")), *events]
    assert rules_of(roles["default", "moectl-scaler"]) == [
        (("apps",), ("deployments/scale",), ("moectl-decode",), ("get", "patch")),
        (("apps",), ("deployments",), ("moectl-decode",), ("get",)),
        (("test.moectl.dev",), ("pools/scale",), ("big-decode",), ("get", "patch")),
        (("test.moectl.dev",), ("pools",), ("big-decode",), ("get",)),
        *pool_rules]
    assert rules_of(roles["serving", "moectl-scaler"]) == [
        (("apps",), ("statefulsets/scale",), ("llm-prefill",), ("get", "patch")),
        (("apps",), ("statefulsets",), ("llm-prefill",), ("get",)),
        *pool_rules]
    assert rules_of(roles["default", "moectl-leader"]) == [
        (("coordination.k8s.io",), ("leases",), ("moectl-leader",), ("get", "update")),
        (("coordination.k8s.io",), ("leases",), (), ("create",)),
        *events]
    for role in roles.values():
        assert not any("*" in field for rule in rules_of(role) for field in rule)
    bindings = [o for o in objects if o["kind"] == "RoleBinding"]
    assert {(b["metadata"]["namespace"], b["roleRef"]["name"]) for b in bindings} == set(roles)
    assert all(b["subjects"] == [{"kind": "ServiceAccount", "name": "moectl", "namespace": "default"}]
               for b in bindings)
    assert not [o for o in objects if o["kind"] in ("ClusterRole", "ClusterRoleBinding")]


def test_monitoring_objects_carry_the_release_label_the_shipped_rules_and_dashboards(kube_cluster):
    objects = render(kube_cluster, "-f", str(CHART / "ci" / "monitoring-values.yaml"))
    for kind in ("ServiceMonitor", "PodMonitor", "PrometheusRule"):
        assert one(objects, kind)["metadata"]["labels"]["release"] == "kps"

    shipped = yaml.safe_load((DASHBOARDS / "prometheus" / "moectl-rules.yml").read_text())
    assert one(objects, "PrometheusRule")["spec"]["groups"] == shipped["groups"]

    service = one(objects, "Service", "moectl")
    monitor = one(objects, "ServiceMonitor")
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    assert monitor["spec"]["endpoints"][0]["port"] == service["spec"]["ports"][0]["name"]
    pod_monitor = one(objects, "PodMonitor")
    decode_pod = one(objects, "Deployment", "moectl-decode")["spec"]["template"]
    assert pod_monitor["spec"]["selector"]["matchLabels"].items() <= decode_pod["metadata"]["labels"].items()
    assert [e["port"] for e in pod_monitor["spec"]["podMetricsEndpoints"]] == [
        p["name"] for p in decode_pod["spec"]["containers"][0]["ports"]]

    maps = [o for o in objects if o["kind"] == "ConfigMap"]
    files = sorted((DASHBOARDS / "grafana").glob("*.json"))
    assert len(maps) == len(files) > 0
    loaded = {name: json.loads(text) for m in maps for name, text in m["data"].items()}
    assert loaded == {f.name: json.loads(f.read_text()) for f in files}
    for config_map in maps:
        assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1"
        assert config_map["metadata"]["annotations"] == {"grafana_folder": "moectl"}


def test_network_policy_opens_the_api_port_and_only_the_egress_it_names(kube_cluster):
    objects = render(kube_cluster, "-f", str(CHART / "ci" / "networkpolicy-values.yaml"))
    policy = one(objects, "NetworkPolicy")["spec"]
    assert policy["podSelector"]["matchLabels"]["app.kubernetes.io/component"] == "controller"
    assert policy["policyTypes"] == ["Ingress", "Egress"]
    [ingress] = policy["ingress"]
    assert ingress["ports"] == [{"port": "http", "protocol": "TCP"}]
    assert ingress["from"][1] == {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}
    ports = [[p["port"] for p in rule["ports"]] for rule in policy["egress"]]
    assert ports == [[53, 53], [5432], [443, 6443]]
    assert policy["egress"][1]["to"] == [{"ipBlock": {"cidr": "10.0.0.10/32"}}]


def test_helm_test_checks_the_api_through_the_service(kube_cluster):
    [pod] = [o for o in render(kube_cluster, "--set", "controller.readinessPath=/readyz")
             if o["kind"] == "Pod"]
    assert pod["metadata"]["annotations"]["helm.sh/hook"] == "test"
    [check] = pod["spec"]["containers"]
    assert check["args"][1:] == ["http://moectl.default.svc:8600", "/readyz"]


def test_notes_give_an_alertmanager_receiver_that_alertmanager_accepts(kube_cluster, tmp_path):
    done = kube_cluster.run_helm("install", RELEASE, str(CHART), "--dry-run=client", "-n", "moectl-system",
                                 "-f", str(CHART / "ci" / "pools-values.yaml"))
    notes = done.stdout.split("NOTES:", 1)[1]
    assert "tiny/decode: Deployment moectl-system/moectl-decode" in notes
    assert "get secret moectl-tokens -o jsonpath='{.data.alerts-token}'" in notes
    snippet = yaml.safe_load(notes[notes.index("  route:"):notes.index("  where ALERTS_TOKEN")])
    [receiver] = snippet["receivers"]
    assert receiver["webhook_configs"] == [{
        "url": "http://moectl.moectl-system.svc:8600/v1/alerts/alertmanager", "send_resolved": True,
        "http_config": {"authorization": {"credentials": "ALERTS_TOKEN"}}}]
    assert snippet["route"]["routes"][0]["receiver"] == receiver["name"]

    # merged into a minimal configuration, Alertmanager's own checker accepts it
    snippet["route"]["receiver"] = "default"
    snippet["receivers"].append({"name": "default"})
    (tmp_path / "alertmanager.yml").write_text(yaml.safe_dump(snippet))
    amtool = require_binary("amtool", "prometheus-alertmanager")
    checked = subprocess.run([amtool, "check-config", str(tmp_path / "alertmanager.yml")], capture_output=True,
                             text=True)
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_the_readmes_install_values_render_what_it_says(kube_cluster, tmp_path):
    readme = (CHART.parents[1] / "docs" / "reference" / "kubernetes.md").read_text()
    block = readme.split("**Values** (`moectl-values.yaml`):", 1)[1].split("```yaml\n", 1)[1].split("```", 1)[0]
    (tmp_path / "moectl-values.yaml").write_text(textwrap.dedent(block))
    objects = render(kube_cluster, "-f", str(tmp_path / "moectl-values.yaml"), namespace="moectl")
    [controller] = one(objects, "Deployment", "moectl")["spec"]["template"]["spec"]["containers"]
    assert controller["image"] == "registry.example/moectl:0.1.0"
    assert env_of(controller)["MOECTL_LEASE_NAME"]["value"] == "moectl-leader"
    assert one(objects, "Role", "moectl-scaler")["metadata"]["namespace"] == "serving"
    assert one(objects, "ServiceMonitor")["metadata"]["labels"]["release"] == "kps"
    assert one(objects, "Job", "moectl-migrate")
