"""CustomResourceDefinitions for tests against the test cluster, installed once per cluster:

- prometheus-operator's own ServiceMonitor, PodMonitor and PrometheusRule definitions (the ones
  kube-prometheus-stack installs), from the operator's release through the Go module proxy, so the apiserver
  validates the chart's monitoring objects against their real schemas;
- `Pool` (test.moectl.dev/v1), a minimal custom workload with a scale subresource, standing in for custom
  resources such as LeaderWorkerSet that the controller may size.
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import tempfile
from pathlib import Path

import kubernetes
import pytest
import yaml
from kubernetes.client import ApiextensionsV1Api
from kubernetes.client.exceptions import ApiException

from support.kube import build
from support.servers import until

PROMETHEUS_OPERATOR = ("github.com/prometheus-operator/prometheus-operator", "v0.85.0")
MONITORING_PLURALS = ("servicemonitors", "podmonitors", "prometheusrules")

POOL_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
    "metadata": {"name": "pools.test.moectl.dev"},
    "spec": {
        "group": "test.moectl.dev", "scope": "Namespaced",
        "names": {"plural": "pools", "singular": "pool", "kind": "Pool", "listKind": "PoolList"},
        "versions": [{
            "name": "v1", "served": True, "storage": True,
            "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                "spec": {"type": "object", "properties": {"replicas": {"type": "integer", "minimum": 0}}},
                "status": {"type": "object", "properties": {"replicas": {"type": "integer"},
                                                            "selector": {"type": "string"}}}}}},
            "subresources": {"status": {}, "scale": {"specReplicasPath": ".spec.replicas",
                                                     "statusReplicasPath": ".status.replicas",
                                                     "labelSelectorPath": ".status.selector"}},
        }],
    },
}


@functools.cache
def prometheus_operator_crds() -> list[dict]:
    """The three monitoring.coreos.com definitions from the pinned prometheus-operator module (Go's module
    cache keeps it after the first download). Skips, or fails under CI=true, when Go or the proxy is missing."""
    go = build.go_binary()
    module, version = PROMETHEUS_OPERATOR
    if go is not None:
        with tempfile.TemporaryDirectory() as outside_any_module:
            done = subprocess.run([go, "mod", "download", "-json", f"{module}@{version}"], cwd=outside_any_module,
                                  env={**build.go_env(), "GOFLAGS": ""}, capture_output=True, text=True, timeout=600)
        if done.returncode == 0:
            directory = Path(json.loads(done.stdout)["Dir"]) / "example" / "prometheus-operator-crd"
            return [yaml.safe_load((directory / f"monitoring.coreos.com_{plural}.yaml").read_text())
                    for plural in MONITORING_PLURALS]
        reason = f"`go mod download {module}@{version}` failed: {done.stdout[-500:]}{done.stderr[-500:]}"
    else:
        reason = "Go not found"
    message = f"prometheus-operator's CRDs unavailable ({reason}); they come from the Go module proxy"
    if os.environ.get("CI") == "true":
        pytest.fail(message)
    pytest.skip(message)


def install_crds(api_client: kubernetes.client.ApiClient, definitions: list[dict]) -> None:
    """Creates each definition unless it exists, then waits until the apiserver serves them all."""
    extensions = ApiextensionsV1Api(api_client)
    for definition in definitions:
        try:
            extensions.create_custom_resource_definition(definition)
        except ApiException as exists:
            if exists.status != 409:
                raise

    def is_established(name: str) -> bool:
        conditions = extensions.read_custom_resource_definition(name).status.conditions or []
        return any(c.type == "Established" and c.status == "True" for c in conditions)

    for definition in definitions:
        name = definition["metadata"]["name"]
        until(f"CRD {name} to be established", lambda name=name: is_established(name), 60)
