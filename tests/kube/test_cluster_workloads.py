"""The test cluster's controller-manager is real: a Deployment stored by the apiserver gets a ReplicaSet from
the deployment controller, and a write to the Deployment's scale subresource reaches that ReplicaSet."""

from __future__ import annotations

import kubernetes
import pytest
from kubernetes.client import AppsV1Api
from support.kube.objects import deployment
from support.servers import until

pytestmark = [pytest.mark.kube, pytest.mark.slow]


def owned_replica_sets(apps: AppsV1Api, namespace: str, owner: str) -> list[kubernetes.client.V1ReplicaSet]:
    return [rs for rs in apps.list_namespaced_replica_set(namespace).items
            if any(ref.kind == "Deployment" and ref.name == owner for ref in rs.metadata.owner_references or [])]


def test_deployment_gets_a_replica_set_that_follows_its_scale(kube_cluster, kube_namespace):
    with kube_cluster.api_client() as admin:
        apps = AppsV1Api(admin)
        apps.create_namespaced_deployment(kube_namespace, deployment("decode", replicas=2))

        [replica_set] = until("the deployment controller to create a ReplicaSet",
                              lambda: owned_replica_sets(apps, kube_namespace, "decode"), 60)
        assert replica_set.spec.replicas == 2

        scale = apps.read_namespaced_deployment_scale("decode", kube_namespace)
        assert scale.spec.replicas == 2
        apps.patch_namespaced_deployment_scale("decode", kube_namespace, {"spec": {"replicas": 5}})

        until("the ReplicaSet to follow the new scale",
              lambda: [rs.spec.replicas for rs in owned_replica_sets(apps, kube_namespace, "decode")] == [5], 60)
        assert apps.read_namespaced_deployment("decode", kube_namespace).spec.replicas == 5
