"""The chart's RBAC, enforced by the real apiserver: authenticated as the chart's ServiceAccount (a TokenRequest
token, as in its pod), the controller can size its named pools (Deployment, StatefulSet, a custom resource with
a scale subresource, in its namespace and another), hold its Lease, record Events, see HPAs and mark a pool pod,
and is refused everything else."""

from __future__ import annotations

import ssl
import uuid
from datetime import UTC, datetime

import httpx
import kubernetes
import pytest
from kubernetes.client import (
    AppsV1Api,
    AutoscalingV2Api,
    CoordinationV1Api,
    CoreV1Api,
    CustomObjectsApi,
    EventsV1Api,
)
from support.chart import CHART, RELEASE
from support.kube.fixture import fresh_namespace
from support.kube.objects import deployment, status_of
from support.servers import until

pytestmark = [pytest.mark.kube, pytest.mark.slow]
meta = kubernetes.client.V1ObjectMeta
DELETION_COST = "controller.kubernetes.io/pod-deletion-cost"


def chart_values(serving: str) -> list[str]:
    """Two replicas (a Lease), both pools managed, a Pool custom resource here and a Deployment in `serving`."""
    targets = [("big", "decode", "Pool", "big-decode", None), ("llm", "decode", "Deployment", "llm-decode", serving)]
    args = ["--set", "controller.replicas=2", "--set", "database.type=postgresql",
            "--set", "database.postgresql.existingSecret=moectl-database", "--no-hooks"]
    for role, kind in (("decode", "Deployment"), ("prefill", "StatefulSet")):
        args += ["--set", f"pools.{role}.enabled=true", "--set", f"pools.{role}.kind={kind}",
                 "--set", f"pools.{role}.sim=true"]
    for i, (name, role, kind, target, namespace) in enumerate(targets):
        args += ["--set", f"scaleTargets[{i}].deployment={name}", "--set", f"scaleTargets[{i}].role={role}",
                 "--set", f"scaleTargets[{i}].kind={kind}", "--set", f"scaleTargets[{i}].name={target}"]
        if kind == "Pool":
            args += ["--set", f"scaleTargets[{i}].apiVersion=test.moectl.dev/v1",
                     "--set", f"scaleTargets[{i}].resource=pools"]
        if namespace:
            args += ["--set", f"scaleTargets[{i}].namespace={namespace}"]
    return args


def core_event(namespace: str, name: str) -> kubernetes.client.CoreV1Event:
    regarding = kubernetes.client.V1ObjectReference(kind="Deployment", name=name, namespace=namespace,
                                                    api_version="apps/v1")
    return kubernetes.client.CoreV1Event(
        metadata=meta(name=f"{name}.{uuid.uuid4().hex[:8]}"), involved_object=regarding, reason="Scaled",
        message="decode 1 -> 2 replicas", type="Normal", count=1,
        source=kubernetes.client.V1EventSource(component="moectl"))


def events_event(namespace: str, name: str) -> kubernetes.client.EventsV1Event:
    regarding = kubernetes.client.V1ObjectReference(kind="Deployment", name=name, namespace=namespace,
                                                    api_version="apps/v1")
    return kubernetes.client.EventsV1Event(
        metadata=meta(name=f"{name}.{uuid.uuid4().hex[:8]}"), event_time=datetime.now(UTC), regarding=regarding,
        reporting_controller="moectl.dev/controller", reporting_instance="moectl-0", action="Scale",
        reason="Scaled", note="decode 1 -> 2 replicas", type="Normal")


def exec_status(client: kubernetes.client.ApiClient, namespace: str, pod: str) -> int:
    """What the apiserver answers a pods/exec request (authorization comes before the stream upgrade)."""
    config = client.configuration
    answer = httpx.post(f"{config.host}/api/v1/namespaces/{namespace}/pods/{pod}/exec",
                        params={"command": "sh", "stdout": "1"},
                        verify=ssl.create_default_context(cafile=config.ssl_ca_cert),
                        headers={"Authorization": f"Bearer {config.api_key['authorization']}"})
    return answer.status_code


@pytest.fixture
def serving_namespace(kube_cluster):
    with fresh_namespace(kube_cluster) as name:
        yield name


def test_the_service_account_can_size_its_pools_and_nothing_else(kube_cluster, kube_namespace, serving_namespace,
                                                                 pool_crd):
    ns, serving = kube_namespace, serving_namespace
    with kube_cluster.api_client() as admin:
        core, apps, custom = CoreV1Api(admin), AppsV1Api(admin), CustomObjectsApi(admin)
        custom.create_namespaced_custom_object("test.moectl.dev", "v1", ns, "pools", {
            "apiVersion": "test.moectl.dev/v1", "kind": "Pool", "metadata": {"name": "big-decode"},
            "spec": {"replicas": 1}})
        for namespace, name in ((serving, "llm-decode"), (serving, "llm-other"), (ns, "unrelated")):
            apps.create_namespaced_deployment(namespace, deployment(name, replicas=1))
        for namespace in (ns, serving):
            core.create_namespaced_secret(namespace, kubernetes.client.V1Secret(
                metadata=meta(name="moectl-database"), string_data={"database-url": "postgresql+psycopg://x@y/z"}))
        CoordinationV1Api(admin).create_namespaced_lease(ns, kubernetes.client.V1Lease(
            metadata=meta(name="someone-else"), spec=kubernetes.client.V1LeaseSpec(holder_identity="other")))
        kube_cluster.run_helm("install", RELEASE, str(CHART), "-n", ns, *chart_values(serving))
        [pool_pod] = until("the decode Deployment's pod (made by the controller-manager; it never runs)",
                           lambda: core.list_namespaced_pod(ns, label_selector="app.kubernetes.io/component=decode")
                           .items, 60)

        with kube_cluster.service_account_client(ns, RELEASE) as client:
            as_apps, as_core = AppsV1Api(client), CoreV1Api(client)
            as_custom, as_leases = CustomObjectsApi(client), CoordinationV1Api(client)
            two = {"spec": {"replicas": 2}}

            # its pools: read and set the scale, read the object
            assert as_apps.read_namespaced_deployment_scale("moectl-decode", ns).spec.replicas == 1
            as_apps.patch_namespaced_deployment_scale("moectl-decode", ns, two)
            assert as_apps.read_namespaced_deployment("moectl-decode", ns).spec.replicas == 2
            assert as_apps.read_namespaced_stateful_set_scale("moectl-prefill", ns).spec.replicas == 1
            as_apps.patch_namespaced_stateful_set_scale("moectl-prefill", ns, two)
            assert as_custom.get_namespaced_custom_object_scale("test.moectl.dev", "v1", ns, "pools",
                                                                "big-decode")["spec"]["replicas"] == 1
            as_custom.patch_namespaced_custom_object_scale("test.moectl.dev", "v1", ns, "pools", "big-decode", two)
            assert custom.get_namespaced_custom_object("test.moectl.dev", "v1", ns, "pools",
                                                       "big-decode")["spec"]["replicas"] == 2
            as_custom.get_namespaced_custom_object("test.moectl.dev", "v1", ns, "pools", "big-decode")
            as_apps.patch_namespaced_deployment_scale("llm-decode", serving, two)
            assert apps.read_namespaced_deployment("llm-decode", serving).spec.replicas == 2

            # another writer's HPA: list and watch, in each pool namespace
            for namespace in (ns, serving):
                assert AutoscalingV2Api(client).list_namespaced_horizontal_pod_autoscaler(namespace).items == []
                watch = AutoscalingV2Api(client).list_namespaced_horizontal_pod_autoscaler(
                    namespace, watch=True, timeout_seconds=1, _preload_content=False)
                assert watch.status == 200
                watch.read()  # the server ends the stream after timeout_seconds
                watch.release_conn()

            # the pod to go on scale-down
            assert pool_pod.metadata.name in {p.metadata.name for p in as_core.list_namespaced_pod(ns).items}
            as_core.patch_namespaced_pod(pool_pod.metadata.name, ns, {"metadata": {"annotations": {
                DELETION_COST: "-100"}}})
            assert core.read_namespaced_pod(pool_pod.metadata.name, ns).metadata.annotations[DELETION_COST] == "-100"

            # its Lease: create, read, renew
            lease = as_leases.create_namespaced_lease(ns, kubernetes.client.V1Lease(
                metadata=meta(name="moectl-leader"), spec=kubernetes.client.V1LeaseSpec(
                    holder_identity="moectl-0", lease_duration_seconds=15)))
            lease.spec.holder_identity = "moectl-1"
            as_leases.replace_namespaced_lease("moectl-leader", ns, lease)
            assert as_leases.read_namespaced_lease("moectl-leader", ns).spec.holder_identity == "moectl-1"

            # Events, both APIs, where its pools are
            for namespace in (ns, serving):
                created = as_core.create_namespaced_event(namespace, core_event(namespace, "moectl-decode"))
                as_core.patch_namespaced_event(created.metadata.name, namespace, {"count": 2})
                created = EventsV1Api(client).create_namespaced_event(namespace, events_event(namespace, "x"))
                EventsV1Api(client).patch_namespaced_event(created.metadata.name, namespace, {"series": {
                    "count": 2, "lastObservedTime": datetime.now(UTC).isoformat()}})

            # refused: everything else
            refused = {
                "pods/exec": lambda: exec_status(client, ns, pool_pod.metadata.name),
                "a secret in its namespace": lambda: status_of(
                    lambda: as_core.read_namespaced_secret("moectl-database", ns)),
                "a secret in another namespace": lambda: status_of(
                    lambda: as_core.read_namespaced_secret("moectl-database", serving)),
                "secrets of another namespace": lambda: status_of(lambda: as_core.list_namespaced_secret(serving)),
                "the scale of a deployment it was not given": lambda: status_of(
                    lambda: as_apps.patch_namespaced_deployment_scale("unrelated", ns, two)),
                "... nor read": lambda: status_of(lambda: as_apps.read_namespaced_deployment_scale("unrelated", ns)),
                "... in the other namespace": lambda: status_of(
                    lambda: as_apps.patch_namespaced_deployment_scale("llm-other", serving, two)),
                "deleting a deployment": lambda: status_of(
                    lambda: as_apps.delete_namespaced_deployment("moectl-decode", ns)),
                "patching a deployment, not its scale": lambda: status_of(
                    lambda: as_apps.patch_namespaced_deployment("moectl-decode", ns, two)),
                "creating a deployment": lambda: status_of(
                    lambda: as_apps.create_namespaced_deployment(ns, deployment("mine", replicas=1))),
                "listing deployments": lambda: status_of(lambda: as_apps.list_namespaced_deployment(ns)),
                "deleting a pod": lambda: status_of(
                    lambda: as_core.delete_namespaced_pod(pool_pod.metadata.name, ns)),
                "pods where it has no pool": lambda: status_of(lambda: as_core.list_namespaced_pod("default")),
                "another Lease": lambda: status_of(lambda: as_leases.replace_namespaced_lease(
                    "someone-else", ns, CoordinationV1Api(admin).read_namespaced_lease("someone-else", ns))),
                "deleting its Lease": lambda: status_of(lambda: as_leases.delete_namespaced_lease("moectl-leader", ns)),
                "a Lease where it runs none": lambda: status_of(lambda: as_leases.create_namespaced_lease(
                    serving, kubernetes.client.V1Lease(metadata=meta(name="moectl-leader")))),
                "creating an HPA": lambda: status_of(
                    lambda: AutoscalingV2Api(client).create_namespaced_horizontal_pod_autoscaler(ns, {
                        "metadata": {"name": "h"}, "spec": {"maxReplicas": 2, "scaleTargetRef": {
                            "apiVersion": "apps/v1", "kind": "Deployment", "name": "moectl-decode"}}})),
            }
            assert {what: check() for what, check in refused.items()} == {what: 403 for what in refused}
        assert apps.read_namespaced_deployment("unrelated", ns).spec.replicas == 1
        assert apps.read_namespaced_deployment("llm-other", serving).spec.replicas == 1
        kube_cluster.run_helm("uninstall", RELEASE, "-n", ns, "--wait", "--timeout", "60s")
