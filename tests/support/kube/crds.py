"""CustomResourceDefinitions for tests against the test cluster, installed once per cluster:

- prometheus-operator's own ServiceMonitor, PodMonitor and PrometheusRule definitions (the ones
  kube-prometheus-stack installs), from the operator's release through the Go module proxy, so the apiserver
  validates the chart's monitoring objects against their real schemas;
- `Pool` (test.moectl.dev/v1), a minimal custom workload with a scale subresource, standing in for custom
  resources such as LeaderWorkerSet that the controller may size;
- the serving workloads moectl sizes (controlplane/kube_kinds.py): LeaderWorkerSet and Grove's
  PodCliqueScalingGroup as their projects serve them (modules pinned below, which `make kube` downloads into Go's
  module cache), and Dynamo's and RoleBasedGroup's scaling adapters as written here (written_crds/, each saying
  why: the proxy refuses their modules).
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

PROMETHEUS_OPERATOR, LWS, GROVE_API = build.CRD_MODULES
WRITTEN_CRDS = Path(__file__).resolve().parent / "written_crds"
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
def module_dir(module: str, version: str) -> Path:
    """Where Go's module cache holds `module@version` (downloaded the first time). Skips, or fails under
    CI=true, when Go or the proxy is missing."""
    go = build.go_binary()
    if go is not None:
        with tempfile.TemporaryDirectory() as outside_any_module:
            done = subprocess.run([go, "mod", "download", "-json", f"{module}@{version}"], cwd=outside_any_module,
                                  env={**build.go_env(), "GOFLAGS": ""}, capture_output=True, text=True, timeout=600)
        if done.returncode == 0:
            return Path(json.loads(done.stdout)["Dir"])
        reason = f"`go mod download {module}@{version}` failed: {done.stdout[-500:]}{done.stderr[-500:]}"
    else:
        reason = "Go not found"
    message = f"{module}@{version} unavailable ({reason}); CRDs come from the Go module proxy"
    if os.environ.get("CI") == "true":
        pytest.fail(message)
    pytest.skip(message)


def prometheus_operator_crds() -> list[dict]:
    """The three monitoring.coreos.com definitions from the pinned prometheus-operator module."""
    directory = module_dir(*PROMETHEUS_OPERATOR) / "example" / "prometheus-operator-crd"
    return [yaml.safe_load((directory / f"monitoring.coreos.com_{plural}.yaml").read_text())
            for plural in MONITORING_PLURALS]


@functools.cache
def workload_crds() -> list[dict]:
    """LeaderWorkerSet and PodCliqueScalingGroup as served by their modules; Dynamo's and RBG's scaling adapters as
    written here."""
    served = [module_dir(*LWS) / "config" / "crd" / "bases" / "leaderworkerset.x-k8s.io_leaderworkersets.yaml",
              module_dir(*GROVE_API) / "core" / "v1alpha1" / "crds" / "grove.io_podcliquescalinggroups.yaml"]
    return [yaml.safe_load(path.read_text()) for path in [*served, *sorted(WRITTEN_CRDS.glob("*.yaml"))]]


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
