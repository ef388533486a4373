"""helm, built here, installs a chart into the test cluster and uninstalls it without leftovers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from kubernetes.client import CoreV1Api
from support.kube.objects import status_of

pytestmark = [pytest.mark.kube, pytest.mark.slow]


def write_chart(directory: Path) -> Path:
    """A throwaway chart with one ConfigMap whose data comes from a value."""
    chart = directory / "throwaway"
    (chart / "templates").mkdir(parents=True)
    (chart / "Chart.yaml").write_text("apiVersion: v2\nname: throwaway\nversion: 0.1.0\n")
    (chart / "values.yaml").write_text("greeting: hello\n")
    (chart / "templates" / "configmap.yaml").write_text(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ .Release.Name }}-greeting\n"
        "data:\n  greeting: {{ .Values.greeting | quote }}\n")
    return chart


def test_helm_version_runs(kube_cluster):
    assert kube_cluster.run_helm("version", "--short").stdout.startswith("v3.")


def test_helm_install_and_uninstall_a_chart(kube_cluster, kube_namespace, tmp_path):
    chart = write_chart(tmp_path)
    kube_cluster.run_helm("install", "demo", str(chart), "--namespace", kube_namespace, "--set", "greeting=hi",
                          "--wait", "--timeout", "60s")
    with kube_cluster.api_client() as admin:
        core = CoreV1Api(admin)
        assert core.read_namespaced_config_map("demo-greeting", kube_namespace).data == {"greeting": "hi"}
        [release] = json.loads(kube_cluster.run_helm("list", "--namespace", kube_namespace, "-o", "json").stdout)
        assert (release["name"], release["status"]) == ("demo", "deployed")

        kube_cluster.run_helm("uninstall", "demo", "--namespace", kube_namespace, "--wait")
        assert status_of(lambda: core.read_namespaced_config_map("demo-greeting", kube_namespace)) == 404
        assert json.loads(kube_cluster.run_helm("list", "--namespace", kube_namespace, "-o", "json").stdout) == []
        assert not core.list_namespaced_secret(kube_namespace, label_selector="owner=helm").items
