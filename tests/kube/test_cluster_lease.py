"""Optimistic concurrency in the test cluster is etcd's: a Lease written with a stale resourceVersion is
refused with 409 Conflict, which leader election depends on."""

from __future__ import annotations

import kubernetes
import pytest
from kubernetes.client import CoordinationV1Api
from kubernetes.client.exceptions import ApiException

pytestmark = [pytest.mark.kube, pytest.mark.slow]


def test_lease_update_with_a_stale_resource_version_conflicts(kube_cluster, kube_namespace):
    with kube_cluster.api_client() as admin:
        leases = CoordinationV1Api(admin)
        created = leases.create_namespaced_lease(kube_namespace, kubernetes.client.V1Lease(
            metadata=kubernetes.client.V1ObjectMeta(name="moectl-leader"),
            spec=kubernetes.client.V1LeaseSpec(holder_identity="a", lease_duration_seconds=15)))
        stale = created.metadata.resource_version

        created.spec.holder_identity = "b"
        taken = leases.replace_namespaced_lease("moectl-leader", kube_namespace, created)
        assert taken.metadata.resource_version != stale

        created.metadata.resource_version = stale
        created.spec.holder_identity = "c"
        with pytest.raises(ApiException) as conflict:
            leases.replace_namespaced_lease("moectl-leader", kube_namespace, created)
        assert conflict.value.status == 409
        assert leases.read_namespaced_lease("moectl-leader", kube_namespace).spec.holder_identity == "b"
