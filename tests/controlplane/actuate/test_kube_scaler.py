"""The Kubernetes pool actuator against the real apiserver and controller-manager, authenticated as the
controller's ServiceAccount with exactly the chart's RBAC: it scales a Deployment (whose ReplicaSet follows),
a StatefulSet and a custom resource through their scale subresource; retries a write refused with 409; marks
the pod that goes on a scale-down; stands down from a pool an HPA (or KEDA) scales or someone else resized,
until a person resumes it; and reports each change and refusal as an Event."""

from __future__ import annotations

import kubernetes
import pytest
from kubernetes.client import AppsV1Api, AutoscalingV2Api, CoreV1Api, CustomObjectsApi
from support.kube.controller import SERVICE_ACCOUNT, grant_controller
from support.kube.objects import (
    POOLS_CRD,
    POOLS_GROUP,
    POOLS_KIND,
    POOLS_PLURAL,
    POOLS_VERSION,
    deployment,
    install_crd,
    statefulset,
    status_of,
)
from support.scaling import ScaledDeployment
from support.servers import until

from controlplane.actuate.fence import SOLE
from controlplane.actuate.kube import DELETION_COST, LEAVING_COST, KubeScaler
from controlplane.actuate.scaler import PoolRef
from controlplane.config import KubeScaleTarget

meta = kubernetes.client.V1ObjectMeta
TARGETS = [
    KubeScaleTarget(deployment="tiny", role="decode", kind="Deployment", name="decode"),
    KubeScaleTarget(deployment="tiny", role="prefill", kind="StatefulSet", name="prefill"),
    KubeScaleTarget(deployment="tiny", role="unified", api_version=f"{POOLS_GROUP}/{POOLS_VERSION}", kind=POOLS_KIND,
                    resource=POOLS_PLURAL, name="unified"),
]
DECODE = PoolRef("tiny", "decode")


@pytest.fixture
def admin(kube_cluster):
    with kube_cluster.api_client() as client:
        install_crd(client, POOLS_CRD)
        yield client


@pytest.fixture
def scaler(kube_cluster, kube_namespace, admin):
    """The three pools, one replica each, and a scaler authenticated as the controller's ServiceAccount."""
    AppsV1Api(admin).create_namespaced_deployment(kube_namespace, deployment("decode", replicas=1))
    AppsV1Api(admin).create_namespaced_stateful_set(kube_namespace, statefulset("prefill", replicas=1))
    CustomObjectsApi(admin).create_namespaced_custom_object(POOLS_GROUP, POOLS_VERSION, kube_namespace, POOLS_PLURAL, {
        "apiVersion": f"{POOLS_GROUP}/{POOLS_VERSION}", "kind": POOLS_KIND, "metadata": {"name": "unified"},
        "spec": {"replicas": 1}})
    grant_controller(kube_cluster, kube_namespace, TARGETS)
    with kube_cluster.service_account_client(kube_namespace, SERVICE_ACCOUNT) as client:
        yield KubeScaler(client, TARGETS, default_namespace=kube_namespace, field_manager="moectl",
                         reporting_instance="test-replica")


@pytest.fixture
def pools(scaler, tmp_path) -> ScaledDeployment:
    return ScaledDeployment.create(f"sqlite:///{tmp_path / 'moectl.db'}", scaler)


def replica_sets(admin, namespace: str) -> list[int]:
    return [rs.spec.replicas for rs in AppsV1Api(admin).list_namespaced_replica_set(namespace).items]


def events(admin, namespace: str, name: str) -> list[tuple[str, str, str]]:
    """moectl's Events on `name` (read through core/v1: the client cannot read the controllers' own through
    events.k8s.io/v1, whose eventTime they leave empty)."""
    found = CoreV1Api(admin).list_namespaced_event(namespace).items
    return [(e.type, e.reason, e.message) for e in found
            if e.involved_object.name == name and e.reporting_component == "moectl.io/controller"]


def pods(admin, namespace: str, app: str) -> list[kubernetes.client.V1Pod]:
    return [p for p in CoreV1Api(admin).list_namespaced_pod(namespace, label_selector=f"app={app}").items
            if p.metadata.deletion_timestamp is None]


def test_a_deployment_is_scaled_its_replica_set_follows_and_the_action_is_verified(pools, admin, kube_namespace):
    request = pools.reconcile("decode", replicas=3)
    [action] = pools.actions("decode")
    assert request.outcome == f"action {action.id} applied" and action.version == 1
    assert action.measured["replicas_applied"] == 3 and action.measured["replicas_before"] == 1
    assert action.measured["target"] == f"Deployment {kube_namespace}/decode"
    found = AppsV1Api(admin).read_namespaced_deployment("decode", kube_namespace)
    assert found.spec.replicas == 3
    assert [m.manager for m in found.metadata.managed_fields if m.subresource == "scale"] == ["moectl"]
    until("the ReplicaSet to follow", lambda: replica_sets(admin, kube_namespace) == [3], 60)
    [(kind, reason, note)] = events(admin, kube_namespace, "decode")
    assert (kind, reason) == ("Normal", "Scaled") and f"from 1 to 3 replicas (action {action.id}" in note
    # pods exist (pending: no kubelet) once the ReplicaSet made them: the platform runs the size
    until("the pods to be made", lambda: len(pods(admin, kube_namespace, "decode")) == 3, 60)
    until("the action to be verified", lambda: pools.reconcile("decode") or pools.actions("decode")[0].status
          == "verified", 60, interval=0.2)
    assert pools.actions("decode")[0].measured["replicas_running"] == 3


def test_a_statefulset_and_a_custom_resource_are_scaled_through_their_scale_subresource(pools, admin,
                                                                                        kube_namespace):
    pools.reconcile("prefill", replicas=3)
    assert AppsV1Api(admin).read_namespaced_stateful_set("prefill", kube_namespace).spec.replicas == 3
    until("three pods at once (parallel)", lambda: len(pods(admin, kube_namespace, "prefill")) == 3, 60)
    pools.reconcile("prefill", replicas=1)
    down = pools.actions("prefill")[-1]
    assert down.measured["leaving"] == ["prefill-2", "prefill-1"]  # a StatefulSet removes the highest ordinals
    until("the highest ordinals to go", lambda: [p.metadata.name for p in pods(admin, kube_namespace, "prefill")]
          == ["prefill-0"], 60)

    objects = CustomObjectsApi(admin)
    pools.reconcile("unified", replicas=4)
    assert objects.get_namespaced_custom_object(POOLS_GROUP, POOLS_VERSION, kube_namespace, POOLS_PLURAL,
                                                "unified")["spec"]["replicas"] == 4
    assert pools.actions("unified")[0].status == "applied"
    # its own controller (none here) would report the replicas running: the action is verified once it does
    objects.patch_namespaced_custom_object_status(POOLS_GROUP, POOLS_VERSION, kube_namespace, POOLS_PLURAL,
                                                  "unified", {"status": {"replicas": 4}})
    pools.reconcile("unified")
    assert pools.actions("unified")[0].status == "verified"


def test_the_pod_chosen_to_go_gets_the_lowest_deletion_cost_and_is_the_one_removed(pools, scaler, admin,
                                                                                 kube_namespace):
    pools.reconcile("decode", replicas=3)
    until("three pods", lambda: len(pods(admin, kube_namespace, "decode")) == 3, 60)
    oldest = min(pods(admin, kube_namespace, "decode"), key=lambda p: p.metadata.creation_timestamp).metadata.name
    leaving = scaler.prepare_scale_down(DECODE, 1, fence=SOLE, chosen=(oldest,))
    assert leaving == [oldest]
    assert CoreV1Api(admin).read_namespaced_pod(oldest, kube_namespace).metadata.annotations[DELETION_COST] == \
        LEAVING_COST
    scaler.set_replicas(DECODE, 2, expected=3, fence=SOLE)
    until("the ReplicaSet to remove the chosen pod", lambda: oldest not in
          [p.metadata.name for p in pods(admin, kube_namespace, "decode")], 60)
    assert len(pods(admin, kube_namespace, "decode")) == 2
    # through the loop, nobody chose: the newest pod goes, and the action says which
    pools.reconcile("decode", replicas=2)  # moectl's size catches up with the one set directly above
    newest = max(pods(admin, kube_namespace, "decode"), key=lambda p: p.metadata.creation_timestamp).metadata.name
    pools.reconcile("decode", replicas=1)
    assert pools.actions("decode")[-1].measured["leaving"] == [newest]
    until("the newest pod to go", lambda: [p.metadata.name for p in pods(admin, kube_namespace, "decode")]
          != [newest] and len(pods(admin, kube_namespace, "decode")) == 1, 60)


class Interfering:
    """A fence that, right before the first write, lets another writer change the target (as admin)."""

    def __init__(self, change):
        self.change, self.num_checks = change, 0

    token = None

    def is_leading(self) -> bool:
        return True

    def check(self, session=None) -> None:
        self.num_checks += 1
        if self.num_checks == 1:
            self.change()


def test_a_write_raced_by_another_writer_is_refused_409_and_retried(scaler, admin, kube_namespace):
    apps = AppsV1Api(admin)
    relabel = Interfering(lambda: apps.patch_namespaced_deployment("decode", kube_namespace, {
        "metadata": {"labels": {"team": "serving"}}}))
    state = scaler.set_replicas(DECODE, 4, expected=1, fence=relabel)
    # the relabel makes one 409; the controller-manager writing the Deployment's status in between may make more:
    # each is read again and the fence checked again before the next write
    assert scaler.num_write_conflicts >= 1 and relabel.num_checks == scaler.num_write_conflicts + 1
    assert state.replicas == 4 and state.is_ours
    found = apps.read_namespaced_deployment("decode", kube_namespace)
    assert found.spec.replicas == 4 and found.metadata.labels["team"] == "serving"


def test_replicas_changed_between_read_and_write_make_moectl_stand_down(pools, admin, kube_namespace):
    apps = AppsV1Api(admin)
    rescale = Interfering(lambda: apps.patch_namespaced_deployment_scale("decode", kube_namespace, {
        "spec": {"replicas": 2}}, field_manager="kubectl"))
    pools.reconcile("decode", replicas=5, fence=rescale)
    [made, conflict] = pools.actions("decode")
    assert conflict.status == "conflict" and conflict.inputs["writer"] == "kubectl"
    assert "kubectl set Deployment" in conflict.reason and "to 2 replicas" in conflict.reason
    assert apps.read_namespaced_deployment("decode", kube_namespace).spec.replicas == 2


def hpa(name: str, target: str, owner: kubernetes.client.V1OwnerReference | None = None):
    return kubernetes.client.V2HorizontalPodAutoscaler(
        metadata=meta(name=name, owner_references=[owner] if owner else None),
        spec=kubernetes.client.V2HorizontalPodAutoscalerSpec(
            scale_target_ref=kubernetes.client.V2CrossVersionObjectReference(api_version="apps/v1",
                                                                            kind="Deployment", name=target),
            min_replicas=1, max_replicas=10))


def test_an_hpa_on_the_target_makes_moectl_stand_down_until_resumed(pools, admin, kube_namespace):
    autoscaling = AutoscalingV2Api(admin)
    autoscaling.create_namespaced_horizontal_pod_autoscaler(kube_namespace, hpa("decode", "decode"))
    request = pools.reconcile("decode", replicas=3)
    [made, conflict] = pools.actions("decode")
    assert request.outcome == f"action {made.id} applied" and conflict.status == "conflict"
    assert conflict.inputs["writer"] == f"HorizontalPodAutoscaler {kube_namespace}/decode"
    assert "moectl stands down from tiny/decode" in conflict.reason and "/size/resume" in conflict.reason
    assert AppsV1Api(admin).read_namespaced_deployment("decode", kube_namespace).spec.replicas == 1
    [(kind, reason, note)] = events(admin, kube_namespace, "decode")
    assert (kind, reason) == ("Warning", "ScaleConflict") and f"action {conflict.id}" in note
    refused = pools.reconcile("decode", replicas=4)
    assert refused.outcome.startswith(f"refused: moectl stands down from this pool (action {conflict.id})")

    pools.resume(conflict.id)
    pools.reconcile("decode")  # the HPA is still there: standing down again
    assert [a.status for a in pools.actions("decode")] == ["applied", "resumed", "conflict"]
    autoscaling.delete_namespaced_horizontal_pod_autoscaler("decode", kube_namespace)
    pools.resume(pools.actions("decode")[-1].id)
    pools.reconcile("decode")
    assert AppsV1Api(admin).read_namespaced_deployment("decode", kube_namespace).spec.replicas == 3


KEDA_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
    "metadata": {"name": "scaledobjects.keda.sh"},
    "spec": {"group": "keda.sh", "scope": "Namespaced",
             "names": {"plural": "scaledobjects", "singular": "scaledobject", "kind": "ScaledObject"},
             "versions": [{"name": "v1alpha1", "served": True, "storage": True, "schema": {"openAPIV3Schema": {
                 "type": "object", "x-kubernetes-preserve-unknown-fields": True}}}]},
}


def test_a_keda_scaled_object_is_named_as_the_writer(pools, admin, kube_namespace):
    """KEDA scales through an HPA it owns: the conflict names the ScaledObject."""
    install_crd(admin, KEDA_CRD)
    scaled = CustomObjectsApi(admin).create_namespaced_custom_object("keda.sh", "v1alpha1", kube_namespace,
                                                                     "scaledobjects", {
        "apiVersion": "keda.sh/v1alpha1", "kind": "ScaledObject", "metadata": {"name": "decode-queue"},
        "spec": {"scaleTargetRef": {"name": "decode"}}})
    owner = kubernetes.client.V1OwnerReference(api_version="keda.sh/v1alpha1", kind="ScaledObject",
                                               name="decode-queue", uid=scaled["metadata"]["uid"], controller=True)
    AutoscalingV2Api(admin).create_namespaced_horizontal_pod_autoscaler(
        kube_namespace, hpa("keda-hpa-decode-queue", "decode", owner))
    pools.reconcile("decode", replicas=2)
    conflict = pools.actions("decode")[-1]
    assert conflict.status == "conflict"
    assert conflict.inputs["writer"] == f"KEDA ScaledObject {kube_namespace}/decode-queue"


def test_a_manual_scale_by_another_field_manager_is_detected_and_not_fought(pools, admin, kube_namespace):
    apps = AppsV1Api(admin)
    pools.reconcile("decode", replicas=3)
    pools.reconcile("decode")
    assert [a.status for a in pools.actions("decode")] in (["applied"], ["verified"])  # its own write: no conflict
    apps.patch_namespaced_deployment_scale("decode", kube_namespace, {"spec": {"replicas": 5}},
                                           field_manager="kubectl")  # what `kubectl scale --replicas=5` does
    pools.reconcile("decode")
    conflict = pools.actions("decode")[-1]
    assert conflict.status == "conflict" and conflict.inputs == {
        "writer": "kubectl", "target": f"Deployment {kube_namespace}/decode", "replicas": 5, "autoscalers": []}
    assert "kubectl set Deployment" in conflict.reason and "after moectl set 3" in conflict.reason
    pools.reconcile("decode")
    assert apps.read_namespaced_deployment("decode", kube_namespace).spec.replicas == 5  # not fought
    pools.resume(conflict.id)
    pools.reconcile("decode")  # resumed: moectl's size again, and no conflict with its own write
    pools.reconcile("decode")
    assert apps.read_namespaced_deployment("decode", kube_namespace).spec.replicas == 3
    assert [a.status for a in pools.actions("decode")][1:] == ["resumed"]


def test_the_service_account_may_do_what_the_actuator_does_and_nothing_else(kube_cluster, scaler, admin,
                                                                             kube_namespace):
    AppsV1Api(admin).create_namespaced_deployment(kube_namespace, deployment("other", replicas=1))
    with kube_cluster.service_account_client(kube_namespace, SERVICE_ACCOUNT) as client:
        apps, core = AppsV1Api(client), CoreV1Api(client)
        assert status_of(lambda: apps.patch_namespaced_deployment_scale("other", kube_namespace, {
            "spec": {"replicas": 2}})) == 403
        assert status_of(lambda: apps.patch_namespaced_deployment("decode", kube_namespace, {
            "spec": {"replicas": 2}})) == 403  # the scale subresource only
        assert status_of(lambda: core.list_namespaced_secret(kube_namespace)) == 403
        assert status_of(lambda: core.delete_collection_namespaced_pod(kube_namespace)) == 403
        assert status_of(lambda: core.list_namespaced_pod("default")) == 403
    assert scaler.read(DECODE).replicas == 1
