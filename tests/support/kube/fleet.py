"""A GPU fleet beside the test apiserver: kube-scheduler places pods, kwok plays the kubelets of fake nodes.

`running_fleet(cluster)` starts both against `cluster` (as its admin), yields a `Fleet`, and stops them on exit.
`Fleet.add_nodes` makes fake nodes: Node objects carrying kwok's annotation and `nvidia.com/gpu` in capacity and
allocatable, which kwok then keeps Ready with leases; a pod bound to one becomes Running, then Ready after its
`pod-ready.stage.kwok.x-k8s.io/delay` annotation (a model load, scaled down: `fake_pod_annotations`). kwok v0.8.0
embeds no stages: they come from its module (support/kube/build.py builds kwok from it; Go's module cache keeps it).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import kubernetes
import yaml
from kubernetes.client import AppsV1Api, CoreV1Api, CustomObjectsApi

from controlplane.actuate.kube import KubeScaler
from controlplane.config import KubeScaleTarget
from controlplane.desired import Policy
from controlplane.kube_kinds import LWS_GROUP, LWS_NAME
from support.auth import AGENT_TOKEN, API_TOKEN
from support.kube import build
from support.kube.client import KubeCluster
from support.kube.cluster import DEFAULT_CONTROLLERS, _spawn, _wait_until, running_cluster
from support.kube.controller import SERVICE_ACCOUNT, grant_controller
from support.kube.crds import install_crds, module_dir, workload_crds
from support.kube.fixture import fresh_namespace
from support.kube.lws import running_lws_controller
from support.scaling import ScaledDeployment
from support.servers import free_port, until

GPU = "nvidia.com/gpu"
FAKE = {"kwok.x-k8s.io/node": "fake"}
READY_SECONDS = 2.0  # a model load, scaled down
STAGES = ("node/fast/node-initialize.yaml", "node/heartbeat-with-lease/node-heartbeat-with-lease.yaml",
          "pod/general/pod-create.yaml", "pod/general/pod-ready.yaml", "pod/general/pod-delete.yaml")


def fake_pod_annotations(ready_seconds: float) -> dict[str, str]:
    """kwok's per-pod delays: created and deleted at once, Ready `ready_seconds` after (kwok takes its 5 s
    default jitter unless the jitter is at least the delay)."""
    ready = f"{int(ready_seconds * 1000)}ms"
    return {"pod-create.stage.kwok.x-k8s.io/delay": "0ms", "pod-create.stage.kwok.x-k8s.io/jitter-delay": "1ms",
            "pod-ready.stage.kwok.x-k8s.io/delay": ready, "pod-ready.stage.kwok.x-k8s.io/jitter-delay": ready,
            "pod-delete.stage.kwok.x-k8s.io/delay": "0ms", "pod-delete.stage.kwok.x-k8s.io/jitter-delay": "1ms"}


def gpu_container() -> kubernetes.client.V1Container:
    """An engine's container asking 8 GPUs (it never runs: kwok reports it)."""
    return kubernetes.client.V1Container(name="engine", image="registry.invalid/none:0",
                                         resources=kubernetes.client.V1ResourceRequirements(limits={GPU: "8"}))


class LwsGroups:
    """A LeaderWorkerSet's groups, as the LeaderWorkerSet controller makes them (support/kube/lws.py): group g of
    `name` is pods `name-g` (leader) and `name-g-1` (worker), labelled by its pod webhook."""

    RESOURCE = ("leaderworkerset.x-k8s.io", "v1", "leaderworkersets")
    SIZE = 2

    def __init__(self, admin: kubernetes.client.ApiClient, namespace: str, name: str):
        self.objects, self.core, self.namespace, self.name = CustomObjectsApi(admin), CoreV1Api(admin), namespace, name

    def pods(self) -> list[kubernetes.client.V1Pod]:
        return [p for p in self.core.list_namespaced_pod(self.namespace, label_selector=f"{LWS_NAME}={self.name}").items
                if p.metadata.deletion_timestamp is None]

    def ready_groups(self) -> list[str]:
        """The groups every pod of which is Ready, by their leader's name."""
        pods = self.pods()
        ready = [p.metadata.labels[LWS_GROUP] for p in pods if is_ready(p)]
        return sorted(f"{self.name}-{g}" for g in set(ready) if ready.count(g) == self.SIZE)


def is_ready(pod: kubernetes.client.V1Pod) -> bool:
    return any(c.type == "Ready" and c.status == "True" for c in pod.status.conditions or [])


def _node(name: str, index: int, gpus: int) -> kubernetes.client.V1Node:
    """A fake node. Its podCIDR matters: kwok gives pods an IP from it, and a pod without one matches kwok's
    pod-create stage again and again, so it seldom gets to pod-ready."""
    resources = {"cpu": "128", "memory": "2Ti", "pods": "110", GPU: str(gpus)}
    return kubernetes.client.V1Node(
        metadata=kubernetes.client.V1ObjectMeta(name=name, annotations=FAKE, labels={"type": "kwok"}),
        spec=kubernetes.client.V1NodeSpec(pod_cidr=f"10.{64 + index // 256}.{index % 256}.0/24"),
        status=kubernetes.client.V1NodeStatus(capacity=resources, allocatable=resources))


@dataclass
class Fleet:
    cluster: KubeCluster
    gpus_per_node: int
    nodes: list[str] = field(default_factory=list)
    num_made: int = 0  # nodes ever made: a new one never reuses a lost one's name or pod CIDR

    def add_nodes(self, count: int) -> list[str]:
        """`count` more fake GPU nodes; returns their names (Ready once kwok initialises them)."""
        first = self.num_made
        made = [f"gpu-{i:04d}" for i in range(first, first + count)]
        with self.cluster.api_client() as admin:
            core = CoreV1Api(admin)
            for i, name in enumerate(made):
                core.create_node(_node(name, first + i, self.gpus_per_node))
        self.num_made += count
        self.nodes += made
        return made

    def remove_node(self, name: str) -> None:
        """A node lost: its Node object goes (the pod garbage collector then deletes the pods bound to it)."""
        with self.cluster.api_client() as admin:
            CoreV1Api(admin).delete_node(name)
        self.nodes.remove(name)

    def num_ready_nodes(self) -> int:
        with self.cluster.api_client() as admin:
            found = CoreV1Api(admin).list_node(label_selector="type=kwok").items
        return sum(any(c.type == "Ready" and c.status == "True" for c in n.status.conditions or []) for n in found)


def _kwok_config(path: Path) -> Path:
    stages_dir = module_dir("sigs.k8s.io/kwok", build.KWOK[1]) / "kustomize" / "stage"
    documents = [{"apiVersion": "config.kwok.x-k8s.io/v1alpha1", "kind": "KwokConfiguration",
                  # a config file's options are not defaulted: kwok refuses zero parallelism
                  "options": {"podPlayStageParallelism": 8, "nodePlayStageParallelism": 4, "nodeLeaseParallelism": 4,
                              "podsOnNodeSyncParallelism": 4, "nodeLeaseDurationSeconds": 40}}]
    documents += [yaml.safe_load((stages_dir / stage).read_text()) for stage in STAGES]
    path.write_text(yaml.safe_dump_all(documents))
    return path


def _scheduler_config(path: Path, kubeconfig: Path) -> Path:
    # the default 50 QPS places a 1,024-GPU fleet's scale-up slowly; a real scheduler has more
    path.write_text(json.dumps({"apiVersion": "kubescheduler.config.k8s.io/v1", "kind": "KubeSchedulerConfiguration",
                                "clientConnection": {"kubeconfig": str(kubeconfig), "qps": 500, "burst": 1000},
                                "leaderElection": {"leaderElect": False}}))
    return path


@contextmanager
def running_fleet(cluster: KubeCluster, gpus_per_node: int = 8) -> Iterator[Fleet]:
    """kube-scheduler and kwok against `cluster`, up until the context exits (no nodes yet: `add_nodes`)."""
    workdir = cluster.workdir
    with ExitStack() as stack:
        port, log = free_port(), workdir / "kube-scheduler.log"
        scheduler = _spawn(stack, [
            str(cluster.bin_dir / "kube-scheduler"),
            f"--config={_scheduler_config(workdir / 'scheduler.json', cluster.kubeconfig)}",
            "--bind-address=127.0.0.1", f"--secure-port={port}", f"--cert-dir={workdir / 'scheduler-certs'}", "--v=1",
        ], log)
        _wait_until(lambda: httpx.get(f"https://127.0.0.1:{port}/healthz", verify=False, timeout=5).status_code
                    == 200, "kube-scheduler", scheduler, log)
        kwok_log = workdir / "kwok.log"
        kwok = _spawn(stack, [
            str(cluster.bin_dir / "kwok"), f"--kubeconfig={cluster.kubeconfig}",
            f"--config={_kwok_config(workdir / 'kwok.yaml')}", "--manage-all-nodes=false",
            "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake", "--node-lease-duration-seconds=40",
        ], kwok_log)
        if kwok.poll() is not None:
            raise RuntimeError(f"kwok exited: {kwok_log.read_text()[-2000:]}")
        yield Fleet(cluster, gpus_per_node)


PREFILL = KubeScaleTarget(deployment="tiny", role="prefill", kind="LeaderWorkerSet", name="prefill")
DECODE = KubeScaleTarget(deployment="tiny", role="decode", kind="Deployment", name="decode")
# the pool planner's: latency targets, the fleet as its GPU budget, a minute's cooldown and a predictive step every
# 30 s (three 10 s windows); the routers count no prompt lengths, so prefill is sized from the mean prompt
POLICY = Policy(mode="auto", cooldown_seconds=0, slo={"ttft_p90_seconds": 1.0, "itl_p90_seconds": 0.05},
                gpu_budget=1024, pool_cooldown_seconds=60, pool_predictive_interval_seconds=30,
                pool_size_prefill_by_mix=False,
                replicas={"prefill": {"min": 0, "max": 64}, "decode": {"min": 0, "max": 128}})
EP_SIZE = {"decode": 8, "prefill": 16}  # GPUs per replica: a pod of 8, a LeaderWorkerSet group of 2 pods of 8
WINDOW_SECONDS, STARTUP_SECONDS = 10.0, 30.0
# the scenarios move moectl's clock by hand, from an hour ago: whatever they record is in the past of a real
# controller process's wall clock (test_4's), never in its future
CLOCK_BEHIND_SECONDS = 3600.0
NODES_READY_S = 120.0


def _create_pools(admin: kubernetes.client.ApiClient, namespace: str) -> LwsGroups:
    """decode: a Deployment of 8-GPU pods; prefill: a LeaderWorkerSet of groups of two 8-GPU pods; both empty."""
    template = kubernetes.client.V1PodTemplateSpec(
        metadata=kubernetes.client.V1ObjectMeta(labels={"app": "decode"},
                                                annotations=fake_pod_annotations(READY_SECONDS)),
        spec=kubernetes.client.V1PodSpec(containers=[gpu_container()], termination_grace_period_seconds=0))
    AppsV1Api(admin).create_namespaced_deployment(namespace, kubernetes.client.V1Deployment(
        metadata=kubernetes.client.V1ObjectMeta(name="decode"),
        spec=kubernetes.client.V1DeploymentSpec(
            replicas=0, selector=kubernetes.client.V1LabelSelector(match_labels={"app": "decode"}), template=template)))
    group, version, plural = LwsGroups.RESOURCE
    CustomObjectsApi(admin).create_namespaced_custom_object(group, version, namespace, plural, {
        "apiVersion": PREFILL.api_version, "kind": PREFILL.kind, "metadata": {"name": PREFILL.name},
        "spec": {"replicas": 0, "leaderWorkerTemplate": {"size": LwsGroups.SIZE, "workerTemplate": {
            "metadata": {"annotations": fake_pod_annotations(READY_SECONDS)},
            "spec": {"containers": [admin.sanitize_for_serialization(gpu_container())],
                     "terminationGracePeriodSeconds": 0}}}}})
    return LwsGroups(admin, namespace, PREFILL.name)


@contextmanager
def serving_fleet(bin_dir: Path, num_nodes: int, database: Path) -> Iterator[tuple]:
    """A cluster of its own (the node-lifecycle controller lifts the not-ready taint the apiserver puts on every
    new node; the pod garbage collector; the controller-manager's API QPS raised and its node grace long, as a
    busy 2-core machine needs), kube-scheduler and kwok, `num_nodes` Ready fake 8-GPU nodes, the two pools and
    moectl sizing them as the controller's ServiceAccount. Yields (cluster, fleet, admin client, namespace,
    ScaledDeployment, LwsGroups)."""
    controllers = (*DEFAULT_CONTROLLERS, "pod-garbage-collector-controller", "node-lifecycle-controller")
    kcm_args = ("--kube-api-qps=200", "--kube-api-burst=400", "--node-monitor-grace-period=300s")
    with running_cluster(bin_dir, controllers, kcm_args) as cluster, running_fleet(cluster) as fleet, \
            fresh_namespace(cluster) as namespace, cluster.api_client() as admin:
        install_crds(admin, workload_crds()[:1])  # LeaderWorkerSet's own
        with running_lws_controller(cluster, admin, namespace):
            fleet.add_nodes(num_nodes)
            until("the fake nodes to be Ready", lambda: fleet.num_ready_nodes() == num_nodes, NODES_READY_S)
            lws = _create_pools(admin, namespace)
            grant_controller(cluster, namespace, [PREFILL, DECODE])
            with cluster.service_account_client(namespace, SERVICE_ACCOUNT) as client:
                scaler = KubeScaler(client, [PREFILL, DECODE], default_namespace=namespace, field_manager="moectl",
                                    reporting_instance="fleet")
                pools = ScaledDeployment.create(
                    f"sqlite:///{database}", scaler, POLICY, roles=("decode", "prefill"), ep_size=EP_SIZE,
                    window_seconds=WINDOW_SECONDS, replica_startup_seconds=STARTUP_SECONDS, api_token=API_TOKEN,
                    agent_token=AGENT_TOKEN, now=time.time() - CLOCK_BEHIND_SECONDS)
                yield cluster, fleet, admin, namespace, pools, lws
