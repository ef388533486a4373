"""A GPU fleet beside the test apiserver: kube-scheduler places pods, kwok plays the kubelets of fake nodes.

`running_fleet(cluster)` starts both against `cluster` (as its admin), yields a `Fleet`, and stops them on exit.
`Fleet.add_nodes` makes fake nodes: Node objects carrying kwok's annotation and `nvidia.com/gpu` in capacity and
allocatable, which kwok then keeps Ready with leases; a pod bound to one becomes Running, then Ready after its
`pod-ready.stage.kwok.x-k8s.io/delay` annotation (a model load, scaled down: `fake_pod_annotations`). kwok v0.8.0
embeds no stages: they come from its module (support/kube/build.py builds kwok from it; Go's module cache keeps it).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import kubernetes
import yaml
from kubernetes.client import CoreV1Api

from support.kube import build
from support.kube.client import KubeCluster
from support.kube.cluster import _spawn, _wait_until
from support.kube.crds import module_dir
from support.servers import free_port

GPU = "nvidia.com/gpu"
FAKE = {"kwok.x-k8s.io/node": "fake"}
STAGES = ("node/fast/node-initialize.yaml", "node/heartbeat-with-lease/node-heartbeat-with-lease.yaml",
          "pod/general/pod-create.yaml", "pod/general/pod-ready.yaml", "pod/general/pod-delete.yaml")


def fake_pod_annotations(ready_seconds: float) -> dict[str, str]:
    """kwok's per-pod delays: created and deleted at once, Ready `ready_seconds` after (kwok takes its 5 s
    default jitter unless the jitter is at least the delay)."""
    ready = f"{int(ready_seconds * 1000)}ms"
    return {"pod-create.stage.kwok.x-k8s.io/delay": "0ms", "pod-create.stage.kwok.x-k8s.io/jitter-delay": "1ms",
            "pod-ready.stage.kwok.x-k8s.io/delay": ready, "pod-ready.stage.kwok.x-k8s.io/jitter-delay": ready,
            "pod-delete.stage.kwok.x-k8s.io/delay": "0ms", "pod-delete.stage.kwok.x-k8s.io/jitter-delay": "1ms"}


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
