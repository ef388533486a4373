"""The Helm chart under test (helm/moectl): where it is, rendering it, and what an install left in the apiserver."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import kubernetes
import yaml
from kubernetes.dynamic import DynamicClient

from support.kube.client import KubeCluster
from support.servers import until

CHART = Path(__file__).resolve().parents[2] / "helm" / "moectl"
CI_VALUES = sorted((CHART / "ci").glob("*-values.yaml"))
# named like the chart, so objects are named "moectl": the Service whose links would inject MOECTL_PORT
RELEASE = "moectl"
# what an install makes besides the chart's own objects: helm's release record, the hook Job, and what the
# controller-manager makes from workloads
DERIVED_KINDS = (("v1", "Secret"), ("batch/v1", "Job"), ("v1", "Pod"), ("apps/v1", "ReplicaSet"),
                 ("apps/v1", "ControllerRevision"))


def render(cluster: KubeCluster, *args: str, namespace: str = "default") -> list[dict]:
    """`helm template` of the chart as release RELEASE: the objects, in helm's order."""
    done = cluster.run_helm("template", RELEASE, str(CHART), "--namespace", namespace, *args)
    return [doc for doc in yaml.safe_load_all(done.stdout) if doc]


def one(objects: Iterable[dict], kind: str, name: str | None = None) -> dict:
    """The single object of `kind` (named `name`, when given)."""
    [found] = [o for o in objects if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)]
    return found


def helm_findings(output: str) -> list[str]:
    """helm's log lines and lint findings other than INFO (a symbolic link in the chart is one: walk.go)."""
    return [line for line in output.splitlines() if "[WARNING]" in line or "[ERROR]" in line or "walk.go" in line]


def stored(api_client: kubernetes.client.ApiClient, namespace: str,
           kinds: Iterable[tuple[str, str]]) -> dict[str, set[str]]:
    """`kind -> names` of the objects of each (apiVersion, kind) in `namespace`, as the apiserver has them."""
    dynamic = DynamicClient(api_client)
    return {kind: {item.metadata.name for item in dynamic.resources.get(api_version=api_version, kind=kind)
                   .get(namespace=namespace).items}
            for api_version, kind in kinds}


def read_back(api_client: kubernetes.client.ApiClient, obj: dict, namespace: str) -> dict:
    """The apiserver's copy of a rendered object (fails with 404 when it was not created)."""
    resource = DynamicClient(api_client).resources.get(api_version=obj["apiVersion"], kind=obj["kind"])
    return resource.get(name=obj["metadata"]["name"],
                        namespace=obj["metadata"].get("namespace", namespace)).to_dict()


def until_stored(cluster: KubeCluster, api_client: kubernetes.client.ApiClient, namespace: str,
                 kinds: Iterable[tuple[str, str]], expected: dict[str, set[str]], timeout: float) -> None:
    """Waits until `stored(...) == expected`; fails after `timeout` s naming each object left over or missing,
    with the controller-manager's log tail (its garbage collector removes what the workloads made)."""
    kinds = list(kinds)
    try:
        until("the namespace to hold what is expected", lambda: stored(api_client, namespace, kinds) == expected,
              timeout)
    except AssertionError:
        now = stored(api_client, namespace, kinds)
        left = {kind: sorted(names - expected.get(kind, set())) for kind, names in now.items()}
        missing = {kind: sorted(names - now.get(kind, set())) for kind, names in expected.items()}
        raise AssertionError(
            f"after {timeout:.0f}s, left over: {({k: v for k, v in left.items() if v})}, "
            f"missing: {({k: v for k, v in missing.items() if v})}\n"
            f"kube-controller-manager log:\n{cluster.log_tail('kube-controller-manager', 40)}") from None
