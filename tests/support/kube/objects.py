"""Small builders and checks that tests against the test cluster share."""

from __future__ import annotations

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


def status_of(call: Callable[[], object]) -> int:
    """The HTTP status the apiserver answered `call` with: 200 when it returned, else the ApiException's."""
    try:
        call()
    except ApiException as refused:
        return refused.status
    return 200
