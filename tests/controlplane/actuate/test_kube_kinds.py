"""Every workload kind moectl sizes (controlplane/kube_kinds.py) in the real test apiserver with its CRD installed
(LeaderWorkerSet and Grove's PodCliqueScalingGroup as their projects serve them; Dynamo's and RoleBasedGroup's
scaling adapters as written in support/kube/written_crds/, whose modules the proxy refuses), scaled by the
controller's ServiceAccount with exactly the Role the targets need.

No kind's controller runs here: this cluster has no scheduler and no kubelets (pods never run, so no controller's
status would move), and the others' operators are not served by the proxy. The LeaderWorkerSet controller itself
runs in the fleet rehearsal (tests/kube/test_fleet.py, with kube-scheduler and kwok; support/kube/lws.py). Here each
test writes what the controller would, the object's status and its pods, and says so. Then what moectl reads of
them is checked against what was written: one replica in pods and GPUs, the ready replicas, replicas whose pods
the scheduler could not place, which pods go on a scale-down."""

from __future__ import annotations

import kubernetes
import pytest
from kubernetes.client import CoreV1Api, CustomObjectsApi
from support.kube.controller import SERVICE_ACCOUNT, grant_controller
from support.kube.crds import install_crds, workload_crds

from controlplane.actuate.fence import SOLE
from controlplane.actuate.kube import GPU, KubeScaler, MissingReplicas
from controlplane.actuate.scaler import PoolRef
from controlplane.config import KubeScaleTarget
from controlplane.kube_kinds import KINDS, LWS_GROUP, LWS_NAME

GPUS_PER_POD = 8
PODS_PER_REPLICA = 2
PCSG_INDEX = KINDS["PodCliqueScalingGroup"].group_label


def target(kind: str, name: str, pods_per_replica: int = PODS_PER_REPLICA) -> KubeScaleTarget:
    return KubeScaleTarget(deployment=name, role="decode", kind=kind, name=name, podsPerReplica=pods_per_replica)


# one target per kind; the LeaderWorkerSet's pods per replica come from its size, not from podsPerReplica
TARGETS = {
    "LeaderWorkerSet": target("LeaderWorkerSet", "lws", pods_per_replica=1),
    "PodCliqueScalingGroup": target("PodCliqueScalingGroup", "pcsg"),
    "DynamoGraphDeploymentScalingAdapter": target("DynamoGraphDeploymentScalingAdapter", "dgd-decode"),
    "RoleBasedGroupScalingAdapter": target("RoleBasedGroupScalingAdapter", "rbg-decode"),
}
SPECS = {  # each kind's smallest valid spec, 2 replicas
    "LeaderWorkerSet": {"replicas": 2, "leaderWorkerTemplate": {"size": PODS_PER_REPLICA, "workerTemplate": {
        "spec": {"containers": [{"name": "engine", "image": "registry.invalid/none:0"}]}}}},
    "PodCliqueScalingGroup": {"replicas": 2, "cliqueNames": ["leader", "worker"]},
    "DynamoGraphDeploymentScalingAdapter": {"replicas": 2, "dgdRef": {"name": "dgd", "serviceName": "decode"}},
    "RoleBasedGroupScalingAdapter": {"replicas": 2, "scaleTargetRef": {"name": "rbg", "role": "decode"}},
}


def pod_labels(kind: str, name: str, replica: int) -> dict[str, str]:
    """What each kind's controller labels a replica's pods with (the LWS ones are its pod webhook's)."""
    labels = {"app": name}
    if kind == "LeaderWorkerSet":
        labels |= {LWS_NAME: name, LWS_GROUP: str(replica)}
    if kind == "PodCliqueScalingGroup":
        labels |= {PCSG_INDEX: str(replica)}
    return labels


@pytest.fixture(scope="module")
def cluster_with_crds(kube_cluster_keeper):
    def install(cluster):
        with cluster.api_client() as admin:
            install_crds(admin, workload_crds())
    kube_cluster_keeper.once("workload-crds", install)
    return kube_cluster_keeper.healthy()[0]


@pytest.fixture
def workloads(cluster_with_crds, kube_namespace):
    """Each kind's object at 2 replicas of 2 pods x 8 GPUs (3 of 4 pods ready: replica 0 whole), its status as
    its controller would write it, and a scaler authenticated as the controller's ServiceAccount."""
    cluster, namespace = cluster_with_crds, kube_namespace
    with cluster.api_client() as admin:
        objects, core = CustomObjectsApi(admin), CoreV1Api(admin)
        for kind, t in TARGETS.items():
            objects.create_namespaced_custom_object(t.group, t.version, namespace, t.resource, {
                "apiVersion": t.api_version, "kind": kind, "metadata": {"name": t.name}, "spec": SPECS[kind]})
            # the kind's controller (not running here) would write this status
            status = {"replicas": 2, "selector": f"app={t.name}", "readyReplicas": 1, "availableReplicas": 1,
                      "scheduledReplicas": 2, "updatedReplicas": 2}
            if kind == "LeaderWorkerSet":
                status = {"replicas": 2, "readyReplicas": 1, "hpaPodSelector": f"{LWS_NAME}={t.name},"
                          "leaderworkerset.sigs.k8s.io/worker-index=0"}
            objects.patch_namespaced_custom_object_status(t.group, t.version, namespace, t.resource, t.name,
                                                          {"status": status})
            for replica in range(2):
                for index in range(PODS_PER_REPLICA):
                    name = f"{t.name}-{replica}-{index}"
                    core.create_namespaced_pod(namespace, kubernetes.client.V1Pod(
                        metadata=kubernetes.client.V1ObjectMeta(name=name, labels=pod_labels(kind, t.name, replica)),
                        spec=kubernetes.client.V1PodSpec(containers=[kubernetes.client.V1Container(
                            name="engine", image="registry.invalid/none:0",
                            resources=kubernetes.client.V1ResourceRequirements(limits={GPU: str(GPUS_PER_POD)}))])))
                    is_ready = replica == 0 or index == 0
                    core.patch_namespaced_pod_status(name, namespace, {"status": {"conditions": [
                        {"type": "Ready", "status": "True" if is_ready else "False"}]}})
        grant_controller(cluster, namespace, list(TARGETS.values()))
        with cluster.service_account_client(namespace, SERVICE_ACCOUNT) as client:
            yield KubeScaler(client, list(TARGETS.values()), default_namespace=namespace, field_manager="moectl",
                             reporting_instance="test"), admin, namespace


@pytest.mark.parametrize("kind", list(TARGETS))
def test_each_kind_is_read_in_pods_gpus_and_ready_replicas_and_scaled_through_its_scale(workloads, kind):
    scaler, admin, namespace = workloads
    t, pool = TARGETS[kind], PoolRef(TARGETS[kind].deployment, "decode")
    state = scaler.read(pool)
    assert (state.replicas, state.running, state.num_unschedulable) == (2, 2, 0)
    assert state.pods_per_replica == PODS_PER_REPLICA  # an LWS's from its leaderWorkerTemplate.size
    assert state.gpus_per_replica == PODS_PER_REPLICA * GPUS_PER_POD
    assert state.num_ready == 1  # the kind's ready count; the Dynamo adapter has none: whole ready replicas of pods

    # the scheduler (not running here) would mark a pod it cannot place so
    CoreV1Api(admin).patch_namespaced_pod_status(f"{t.name}-1-1", namespace, {"status": {"conditions": [
        {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
         "message": "0/128 nodes are available: 128 Insufficient nvidia.com/gpu."}]}})
    state = scaler.read(pool)
    assert state.num_unschedulable == 1 and "Insufficient nvidia.com/gpu" in state.unschedulable_reason

    leaving = scaler.prepare_scale_down(pool, 1, fence=SOLE)
    if kind in ("LeaderWorkerSet", "PodCliqueScalingGroup"):  # the whole highest group goes
        assert leaving == [f"{t.name}-1-0", f"{t.name}-1-1"]
    written = scaler.set_replicas(pool, 1, expected=2, fence=SOLE)
    assert written.replicas == 1 and written.is_ours
    found = CustomObjectsApi(admin).get_namespaced_custom_object(t.group, t.version, namespace, t.resource, t.name)
    assert found["spec"]["replicas"] == 1


def test_a_target_without_spec_replicas_is_a_clear_error_naming_the_field(workloads):
    scaler, admin, namespace = workloads
    t = TARGETS["RoleBasedGroupScalingAdapter"]  # its spec.replicas has no default
    objects = CustomObjectsApi(admin)
    objects.delete_namespaced_custom_object(t.group, t.version, namespace, t.resource, t.name)
    objects.create_namespaced_custom_object(t.group, t.version, namespace, t.resource, {
        "apiVersion": t.api_version, "kind": t.kind, "metadata": {"name": t.name},
        "spec": {"scaleTargetRef": {"name": "rbg", "role": "decode"}}})
    with pytest.raises(MissingReplicas, match=r"has no spec.replicas.*set spec.replicas on it"):
        scaler.read(PoolRef(t.deployment, "decode"))


def test_each_kind_needs_only_its_scale_and_a_read_of_it(workloads):
    scaler, _, namespace = workloads
    # the ServiceAccount reads and scales its targets, by name, and nothing of another object of the same kind
    t = TARGETS["LeaderWorkerSet"]
    objects = scaler.objects
    with pytest.raises(kubernetes.client.exceptions.ApiException) as refused:
        objects.get_namespaced_custom_object_scale(t.group, t.version, namespace, t.resource, "another")
    assert refused.value.status == 403
    with pytest.raises(kubernetes.client.exceptions.ApiException) as refused:
        objects.delete_namespaced_custom_object(t.group, t.version, namespace, t.resource, t.name)
    assert refused.value.status == 403
