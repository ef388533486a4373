"""Leader election through a coordination.k8s.io/v1 Lease in the real apiserver, as the controller's
ServiceAccount (chart RBAC): one holder, a takeover after the lease expires on the candidate's clock (the
term is leaseTransitions), compare-and-set by resourceVersion, and a leader that lost the Lease writes
nothing to a scale target."""

from __future__ import annotations

import pytest
from kubernetes.client import AppsV1Api, CoordinationV1Api, CoreV1Api
from support.clock import Clock
from support.kube.controller import SERVICE_ACCOUNT, grant_controller
from support.kube.objects import deployment

from controlplane.actuate.fence import NotLeader
from controlplane.actuate.kube import KubeScaler
from controlplane.actuate.scaler import PoolRef
from controlplane.config import KubeScaleTarget
from controlplane.leader.elector import Elector, LeaderRecord
from controlplane.leader.lease import LeaseRecords

LEASE, RENEW, NAME = 10.0, 6.0, "moectl-leader"
DECODE = KubeScaleTarget(deployment="tiny", role="decode", kind="Deployment", name="decode")


@pytest.fixture
def client(kube_cluster, kube_namespace):
    with kube_cluster.api_client() as admin:
        AppsV1Api(admin).create_namespaced_deployment(kube_namespace, deployment("decode", replicas=1))
    grant_controller(kube_cluster, kube_namespace, [DECODE], lease_name=NAME)
    with kube_cluster.service_account_client(kube_namespace, SERVICE_ACCOUNT) as client:
        yield client


def elector(client, namespace: str, identity: str, clock: Clock) -> Elector:
    return Elector(LeaseRecords(client, namespace=namespace, name=NAME), identity=identity, lease_seconds=LEASE,
                   renew_seconds=RENEW, clock=clock)


def lease(kube_cluster, namespace: str):
    with kube_cluster.api_client() as admin:
        return CoordinationV1Api(admin).read_namespaced_lease(NAME, namespace).spec


def test_one_holds_the_lease_and_another_takes_it_once_expired(kube_cluster, kube_namespace, client):
    ca, cb = Clock(100.0), Clock(100.0)
    a, b = elector(client, kube_namespace, "a", ca), elector(client, kube_namespace, "b", cb)
    assert a.campaign() and not b.campaign()
    spec = lease(kube_cluster, kube_namespace)
    assert (spec.holder_identity, spec.lease_transitions, spec.lease_duration_seconds) == ("a", 0, 10)
    ca.now += 3
    assert a.campaign()  # renewed: renewTime moves, the holder and the acquireTime stay
    renewed = lease(kube_cluster, kube_namespace)
    assert renewed.renew_time > spec.renew_time and renewed.acquire_time == spec.acquire_time
    cb.now += LEASE + 1  # b saw a renew only at its first look: the lease is over on b's clock
    assert not b.campaign()  # ...but a renewed since: b's wait starts again
    cb.now += LEASE + 1
    assert b.campaign() and b.token == "b#1"
    spec = lease(kube_cluster, kube_namespace)
    assert (spec.holder_identity, spec.lease_transitions) == ("b", 1)
    with kube_cluster.api_client() as admin:  # each new holder is an Event on the Lease (read through core/v1)
        notes = [e.message for e in CoreV1Api(admin).list_namespaced_event(kube_namespace).items
                 if e.involved_object.kind == "Lease" and e.reason == "LeaderElection"]
    assert sorted(notes) == ["a became leader (term 0)", "b became leader (term 1)"]
    with pytest.raises(NotLeader, match="passed from a"):
        a.check()
    assert not a.campaign()


def test_a_stale_resource_version_loses_the_compare_and_set(client, kube_namespace):
    records = LeaseRecords(client, namespace=kube_namespace, name=NAME)
    assert records.create(LeaderRecord("a", 0, LEASE, 1_800_000_000.0))
    assert not records.create(LeaderRecord("b", 0, LEASE, 1_800_000_000.0))
    stale = records.read()
    assert records.replace(stale, LeaderRecord("b", 1, LEASE, 1_800_000_020.0))
    assert not records.replace(stale, LeaderRecord("c", 1, LEASE, 1_800_000_020.0))
    assert (records.read().holder, records.read().term) == ("b", 1)


def test_a_leader_that_lost_the_lease_writes_nothing_to_its_pools(kube_cluster, kube_namespace, client):
    ca, cb = Clock(100.0), Clock(100.0)
    a, b = elector(client, kube_namespace, "a", ca), elector(client, kube_namespace, "b", cb)
    scaler = KubeScaler(client, [DECODE], default_namespace=kube_namespace, field_manager="moectl",
                        reporting_instance="a")
    assert a.campaign() and not b.campaign()
    a.release()  # a graceful stop: b takes it at once
    assert b.campaign()
    ca.now += 1  # a still within its own renew deadline: only the live read of the Lease stops it
    with pytest.raises(NotLeader):
        scaler.set_replicas(PoolRef("tiny", "decode"), 3, expected=1, fence=a)
    with kube_cluster.api_client() as admin:
        assert AppsV1Api(admin).read_namespaced_deployment("decode", kube_namespace).spec.replicas == 1
        scaler.set_replicas(PoolRef("tiny", "decode"), 3, expected=1, fence=b)
        assert AppsV1Api(admin).read_namespaced_deployment("decode", kube_namespace).spec.replicas == 3
