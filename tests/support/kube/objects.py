"""Small builders and checks that tests against the test cluster share."""

from __future__ import annotations

import time
from collections.abc import Callable

import kubernetes
from kubernetes.client.exceptions import ApiException


def deployment(name: str, replicas: int, image: str = "registry.invalid/none:0") -> kubernetes.client.V1Deployment:
    """An apps/v1 Deployment of one container selected by `app: name` (no kubelet here: its pods never run)."""
    labels = {"app": name}
    return kubernetes.client.V1Deployment(
        metadata=kubernetes.client.V1ObjectMeta(name=name),
        spec=kubernetes.client.V1DeploymentSpec(
            replicas=replicas,
            selector=kubernetes.client.V1LabelSelector(match_labels=labels),
            template=kubernetes.client.V1PodTemplateSpec(
                metadata=kubernetes.client.V1ObjectMeta(labels=labels),
                spec=kubernetes.client.V1PodSpec(containers=[kubernetes.client.V1Container(name=name, image=image)]),
            ),
        ),
    )


def statefulset(name: str, replicas: int, image: str = "registry.invalid/none:0") -> kubernetes.client.V1StatefulSet:
    """An apps/v1 StatefulSet with parallel pod management: without a kubelet no pod ever runs, and the
    default (ordered) management would wait forever for the first to be ready before making the next."""
    labels = {"app": name}
    return kubernetes.client.V1StatefulSet(
        metadata=kubernetes.client.V1ObjectMeta(name=name),
        spec=kubernetes.client.V1StatefulSetSpec(
            replicas=replicas, service_name=name, pod_management_policy="Parallel",
            selector=kubernetes.client.V1LabelSelector(match_labels=labels),
            template=kubernetes.client.V1PodTemplateSpec(
                metadata=kubernetes.client.V1ObjectMeta(labels=labels),
                spec=kubernetes.client.V1PodSpec(containers=[kubernetes.client.V1Container(name=name, image=image)]),
            ),
        ),
    )


# a small custom resource with a scale subresource (as a LeaderWorkerSet has): no controller acts on it
POOLS_GROUP, POOLS_VERSION, POOLS_PLURAL, POOLS_KIND = "test.moectl.io", "v1", "inferencepools", "InferencePool"
POOLS_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
    "metadata": {"name": f"{POOLS_PLURAL}.{POOLS_GROUP}"},
    "spec": {"group": POOLS_GROUP, "scope": "Namespaced",
             "names": {"plural": POOLS_PLURAL, "singular": "inferencepool", "kind": POOLS_KIND},
             "versions": [{"name": POOLS_VERSION, "served": True, "storage": True,
                           "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                               "spec": {"type": "object", "properties": {"replicas": {"type": "integer"}}},
                               "status": {"type": "object", "properties": {"replicas": {"type": "integer"},
                                                                           "selector": {"type": "string"}}}}}},
                           "subresources": {"status": {}, "scale": {
                               "specReplicasPath": ".spec.replicas", "statusReplicasPath": ".status.replicas",
                               "labelSelectorPath": ".status.selector"}}}]},
}


def install_crd(admin: kubernetes.client.ApiClient, crd: dict) -> None:
    """Creates `crd` (unless it exists) and waits until the apiserver serves it."""
    extensions = kubernetes.client.ApiextensionsV1Api(admin)
    name = crd["metadata"]["name"]
    try:
        extensions.create_custom_resource_definition(crd)
    except ApiException as exists:
        if exists.status != 409:
            raise
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        conditions = extensions.read_custom_resource_definition(name).status.conditions or []
        if any(c.type == "Established" and c.status == "True" for c in conditions):
            return
        time.sleep(0.2)
    raise TimeoutError(f"CRD {name} not established within 60s")


def status_of(call: Callable[[], object]) -> int:
    """The HTTP status the apiserver answered `call` with: 200 when it returned, else the ApiException's."""
    try:
        call()
    except ApiException as refused:
        return refused.status
    return 200
