"""The Kubernetes pool actuator and leader election against the test cluster (tests/support/kube), as the
controller's ServiceAccount with the chart's RBAC:

- scale round trip: `KubeScaler.set_replicas` (read the scale, write it with its resourceVersion), then until
  the Deployment's ReplicaSet has the new size (the controller-manager followed), and one whole
  `Reconciler.reconcile_pool` of a person's request (SQLite) that ends in that write;
- takeover: two real controller replicas (`python -m controlplane serve`, PostgreSQL), the leader killed with
  SIGKILL, until the other holds the election (a Lease, or the database row), with the tests' timing
  (lease 3 s, renew deadline 2 s, retry 0.5 s).

Prints markdown tables.

    python -m benchmarks.kube_actuator [--writes 20] [--takeovers 5]
"""

from __future__ import annotations

import argparse
import json
import pathlib
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable

TESTS_DIR = pathlib.Path(__file__).resolve().parents[1] / "tests"


def row(name: str, values: list[float], unit: float = 1.0, digits: int = 2) -> str:
    scaled = [v * unit for v in values]
    return (f"| {name} | {len(values)} | {statistics.median(scaled):.{digits}f} | {min(scaled):.{digits}f} | "
            f"{max(scaled):.{digits}f} |")


def scale_round_trips(cluster, namespace: str, num_writes: int) -> list[str]:
    from kubernetes.client import AppsV1Api
    from support.kube.controller import SERVICE_ACCOUNT, grant_controller
    from support.kube.objects import deployment
    from support.scaling import ScaledDeployment

    from controlplane.actuate.fence import SOLE
    from controlplane.actuate.kube import KubeScaler
    from controlplane.actuate.scaler import PoolRef
    from controlplane.config import KubeScaleTarget

    target = KubeScaleTarget(deployment="tiny", role="decode", kind="Deployment", name="decode")
    with cluster.api_client() as admin:
        apps = AppsV1Api(admin)
        apps.create_namespaced_deployment(namespace, deployment("decode", replicas=1))
        grant_controller(cluster, namespace, [target])
        with cluster.service_account_client(namespace, SERVICE_ACCOUNT) as client:
            scaler = KubeScaler(client, [target], default_namespace=namespace, field_manager="moectl",
                                reporting_instance="benchmark")
            writes, follows, reconciles = [], [], []
            current = 1
            for _ in range(num_writes):
                wanted = 2 if current != 2 else 3
                started = time.monotonic()
                scaler.set_replicas(PoolRef("tiny", "decode"), wanted, expected=current, fence=SOLE)
                writes.append(time.monotonic() - started)
                while [rs.spec.replicas for rs in apps.list_namespaced_replica_set(namespace).items] != [wanted]:
                    time.sleep(0.005)
                follows.append(time.monotonic() - started)
                current = wanted
            with tempfile.TemporaryDirectory() as workdir:
                pools = ScaledDeployment.create(f"sqlite:///{workdir}/moectl.db", scaler)
                for i in range(num_writes):
                    wanted = 2 + i % 2
                    started = time.monotonic()
                    pools.reconcile("decode", replicas=wanted)
                    reconciles.append(time.monotonic() - started)
                    assert apps.read_namespaced_deployment("decode", namespace).spec.replicas == wanted
                    pools.now += 2.0  # past the in-flight hold of the applied size
    return ["| step | n | median ms | min ms | max ms |", "|---|---|---|---|---|",
            row("`set_replicas`: read scale + write with resourceVersion", writes, 1000, 0),
            row("... until the ReplicaSet has the new size", follows, 1000, 0),
            row("`Reconciler.reconcile_pool` of a person's request, ending in the write", reconciles, 1000, 0)]


def takeovers(name: str, env: dict[str, str], holder: Callable[[], str | None], database_url: str,
              num_takeovers: int) -> list[float]:
    from support.controllers import register, replica
    from support.servers import until

    from controlplane.store.db import upgrade

    upgrade(database_url)
    measured = []
    with tempfile.TemporaryDirectory() as workdir:
        for i in range(num_takeovers):
            with replica(f"{name}-a{i}", env, pathlib.Path(workdir)) as a:
                until("a to lead", lambda: holder() == a.identity, 30, interval=0.05)
                with replica(f"{name}-b{i}", env, pathlib.Path(workdir)) as b:
                    if i == 0:
                        register(b.url, {"mode": "auto"})
                    time.sleep(1.0)  # b has seen a renew a few times
                    killed = time.monotonic()
                    a.kill()
                    until("b to take over", lambda: holder() == b.identity, 30, interval=0.02)
                    measured.append(time.monotonic() - killed)
    return measured


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--writes", type=int, default=20)
    parser.add_argument("--takeovers", type=int, default=5)
    args = parser.parse_args()
    sys.path.insert(0, str(TESTS_DIR))
    import kubernetes
    from kubernetes.client import CoordinationV1Api, CoreV1Api
    from support import servers
    from support.controllers import LEASE_SECONDS, RETRY_SECONDS, leader
    from support.kube import build
    from support.kube.cluster import running_cluster
    from support.kube.controller import controller_kubeconfig, grant_controller

    from controlplane.config import KubeScaleTarget

    with running_cluster(build.bin_dir()) as cluster, cluster.api_client() as admin, servers.postgres() as pg:
        for namespace in ("scale", "lease"):
            CoreV1Api(admin).create_namespace(kubernetes.client.V1Namespace(
                metadata=kubernetes.client.V1ObjectMeta(name=namespace)))
        print(f"Kubernetes {build.kube_version()}: scale round trips on a Deployment, as the controller's "
              f"ServiceAccount\n")
        print("\n".join(scale_round_trips(cluster, "scale", args.writes)))

        target = KubeScaleTarget(deployment="tiny", role="decode", namespace="lease", kind="Deployment",
                                 name="decode")
        grant_controller(cluster, "lease", [target], lease_name="moectl-leader")
        with tempfile.TemporaryDirectory() as workdir:
            kubeconfig = controller_kubeconfig(cluster, "lease", pathlib.Path(workdir) / "kubeconfig")
            lease_url = servers.create_database(*pg, f"b{uuid.uuid4().hex[:12]}")

            def lease_holder() -> str | None:
                leases = CoordinationV1Api(admin).list_namespaced_lease("lease").items
                return next((x.spec.holder_identity for x in leases if x.metadata.name == "moectl-leader"), None)

            by_lease = takeovers("lease", {"MOECTL_DATABASE_URL": lease_url, "MOECTL_LEASE_NAME": "moectl-leader",
                                           "MOECTL_LEASE_NAMESPACE": "lease", "MOECTL_KUBECONFIG": str(kubeconfig),
                                           "MOECTL_KUBE_SCALE_TARGETS": json.dumps([target.model_dump(by_alias=True)])},
                                 lease_holder, lease_url, args.takeovers)
        database_url = servers.create_database(*pg, f"b{uuid.uuid4().hex[:12]}")
        by_database = takeovers("db", {"MOECTL_DATABASE_URL": database_url}, lambda: leader(database_url),
                                database_url, args.takeovers)
    print(f"\nTakeover after SIGKILL of the leader (lease {LEASE_SECONDS:g} s, retry {RETRY_SECONDS:g} s; "
          f"bound: lease + retry)\n")
    print("| election | n | median s | min s | max s |\n|---|---|---|---|---|")
    print(row("coordination.k8s.io Lease", by_lease))
    print(row("database row (PostgreSQL)", by_database))


if __name__ == "__main__":
    main()
