"""A 1,024-GPU fleet rehearsal: the test apiserver with kube-scheduler and kwok (128 fake nodes x 8 nvidia.com/gpu),
a prefill pool of LeaderWorkerSet groups (2 pods x 8 GPUs) and a decode pool of a plain Deployment (1 pod x 8
GPUs), sized by moectl through its one reconcile path, authenticated as the controller's ServiceAccount.

What is real: the apiserver (LWS's served CRD), the deployment and ReplicaSet controllers, kube-scheduler placing
pods by nvidia.com/gpu, kwok making bound pods Running and Ready after a delay (a model load, scaled down to 2 s).
What is not: the LeaderWorkerSet controller (its webhooks need TLS to a local endpoint): `LwsGroups` plays its part
here, making each group's leader and worker pods with its labels and writing the LWS status, and says so. The sizes
are asked as a person asks them (the pool planner's own decisions are tested in tests/controlplane/); each
scenario checks what moectl does with the platform's answer. One cluster for the module.
"""

from __future__ import annotations

import time

import kubernetes
import pytest
from kubernetes.client import AppsV1Api, AutoscalingV2Api, CoreV1Api
from support.kube import build
from support.kube.fixture import require_built
from support.kube.fleet import POLICY, LwsGroups, is_ready, serving_fleet
from support.scaling import ScaledDeployment
from support.servers import until

from controlplane.actuate.scaler import PoolRef
from controlplane.loop import reconcile_pools
from controlplane.loop.reconcile import Reconciler
from controlplane.store import deployments, requests
from controlplane.store.knobs import POOL_SIZE

# the scenarios run in order on one fleet (each starts from the sizes the one before left): under make test's
# `--dist loadgroup` a module's tests go to either worker unless grouped, and test_4 once ran alone on a second,
# fresh fleet (its own module fixture), where no size had been applied before: the pass then recorded 40 as the
# size the fleet runs (adopted), not as found applied, and `found_applied` was missing
pytestmark = [pytest.mark.kube, pytest.mark.slow, pytest.mark.xdist_group("kube_fleet")]
NUM_NODES, GPUS_PER_NODE = 128, 8
GROUP_SIZE = LwsGroups.SIZE
LWS = LwsGroups.RESOURCE
WAIT_S = 120.0


class Rehearsal:
    """The fleet, the two pools, moectl's store and scaler, and counts of writes on the targets."""

    def __init__(self, cluster, fleet, admin, namespace, pools: ScaledDeployment, lws: LwsGroups):
        self.cluster, self.fleet, self.admin, self.namespace, self.pools, self.lws = (cluster, fleet, admin,
                                                                                    namespace, pools, lws)
        self.apps, self.core = AppsV1Api(admin), CoreV1Api(admin)

    def generation(self, role: str) -> int:
        """metadata.generation: one more for every write of spec.replicas."""
        if role == "decode":
            return self.apps.read_namespaced_deployment("decode", self.namespace).metadata.generation
        return self.lws.objects.get_namespaced_custom_object(*LWS[:2], self.namespace, LWS[2],
                                                             "prefill")["metadata"]["generation"]

    def pass_(self, role: str, replicas: int | None = None) -> None:
        """One reconcile of `role` (a person's size first, when given), then the LWS stand-in catches up."""
        self.pools.reconcile(role, replicas=replicas)
        self.lws.sync()

    def pods(self, role: str) -> list[kubernetes.client.V1Pod]:
        if role == "prefill":
            return self.lws.pods()
        return [p for p in self.core.list_namespaced_pod(self.namespace, label_selector="app=decode").items
                if p.metadata.deletion_timestamp is None]

    def gpus_asked(self) -> int:
        return sum(8 for role in ("prefill", "decode") for _ in self.pods(role))

    def all_ready(self, role: str, num_pods: int) -> bool:
        self.lws.sync()
        pods = self.pods(role)
        self.last_seen = f"{role}: {len(pods)} pods, {sum(map(is_ready, pods))} ready, " \
                         f"{sum(p.spec.node_name is not None for p in pods)} placed, " \
                         f"{[(c.reason, c.message) for p in pods[:1] for c in p.status.conditions or []]}"
        return len(pods) == num_pods and all(is_ready(p) for p in pods)

    def events(self, name: str, reason: str) -> list[str]:
        return [e.message for e in self.core.list_namespaced_event(self.namespace).items
                if e.involved_object.name == name and e.reason == reason]


@pytest.fixture(scope="module")
def rehearsal(tmp_path_factory):
    bin_dir = require_built()
    if not all(build.is_cached(bin_dir, b) for b in build.binaries() if b.name in ("kube-scheduler", "kwok")):
        pytest.skip(f"kube-scheduler and kwok not built: run {build.BUILD_HINT}")
    with serving_fleet(bin_dir, NUM_NODES, tmp_path_factory.mktemp("fleet") / "moectl.db") as served:
        yield Rehearsal(*served)


def test_1_a_traffic_shift_moves_gpus_from_decode_to_prefill_draining_first(rehearsal):
    r = rehearsal
    started = time.monotonic()
    r.pass_("decode", replicas=64)  # 512 GPUs
    r.pass_("prefill", replicas=32)  # 32 groups x 2 pods x 8 GPUs = 512 GPUs: the whole fleet
    try:
        until("all 128 pods Ready", lambda: r.all_ready("decode", 64) and r.all_ready("prefill", 64), WAIT_S)
    except AssertionError:
        print(r.last_seen, r.pools.actions("decode")[-1].measured, r.cluster.log_tail("kube-controller-manager", 15))
        raise
    first_ready_s = time.monotonic() - started

    # traffic shifts to long prompts: decode gives 16 pods (128 GPUs) to 8 more prefill groups
    before = {p.metadata.name for p in r.pods("decode")}
    r.pass_("decode", replicas=48)
    down = r.pools.actions("decode")[-1]
    leaving = down.measured["leaving"]
    assert len(leaving) == 16 and set(leaving) <= before  # drained (lowest deletion cost) before the write
    until("the drained pods, and only they, to go", lambda: {p.metadata.name for p in r.pods("decode")}
          == before - set(leaving), WAIT_S)
    r.pass_("prefill", replicas=40)
    assert r.gpus_asked() <= NUM_NODES * GPUS_PER_NODE
    until("the new prefill groups Ready", lambda: r.all_ready("prefill", 80), WAIT_S)
    assert r.all_ready("decode", 48) and r.gpus_asked() == NUM_NODES * GPUS_PER_NODE
    state = r.pools.scaler.read(PoolRef("tiny", "prefill"))
    assert (state.num_ready, state.pods_per_replica, state.gpus_per_replica) == (40, GROUP_SIZE, 16)
    print(f"fleet: 128 pods Ready {first_ready_s:.1f}s after the decision")


def test_2_a_full_cluster_leaves_pods_pending_moectl_says_so_and_asks_no_more(rehearsal):
    r = rehearsal
    r.pass_("prefill", replicas=42)  # 2 groups more than the fleet holds
    until("the scheduler to find no room", lambda: sum(
        any(c.type == "PodScheduled" and c.reason == "Unschedulable" for c in p.status.conditions or [])
        for p in r.pods("prefill")) == 4, WAIT_S)
    generation = r.generation("prefill")
    r.pass_("prefill")  # the pass that sees it
    holder = r.pools.actions("prefill")[-1]
    assert holder.measured["replicas_unschedulable"] == 2
    assert "Insufficient nvidia.com/gpu" in holder.measured["unschedulable_reason"]
    [warning] = r.events("prefill", "Unschedulable")
    assert "2 of 42 replicas" in warning and "asks for no more" in warning
    # the pool planner's input: the 2 unplaced groups are not starting, and the pool may not grow past what it serves
    with r.pools.sessions() as session:
        deployment = deployments.get(session, "tiny")
        by_role = {role: deployments.get_pool(session, deployment, role) for role in ("prefill", "decode")}
        sizes = reconcile_pools._sizes(session, by_role, POLICY, r.pools.settings, r.pools.now)
    assert (sizes["prefill"].num_unschedulable, sizes["prefill"].num_starting) == (2, 40)  # no agents report here
    assert sizes["prefill"].max_replicas == 40
    for _ in range(3):  # passes go on: no write, no second Event, no new action
        r.pass_("prefill")
    assert r.generation("prefill") == generation and len(r.events("prefill", "Unschedulable")) == 1
    assert r.pools.actions("prefill")[-1].id == holder.id

    # capacity returns: 4 nodes; the pending groups are placed and moectl says so
    r.fleet.add_nodes(4)
    until("the pending groups Ready", lambda: r.all_ready("prefill", 84), WAIT_S)
    r.pass_("prefill")
    assert r.pools.actions("prefill")[-1].measured["replicas_unschedulable"] == 0
    assert len(r.events("prefill", "Placed")) == 1 and r.generation("prefill") == generation


def test_3_a_lost_node_drops_the_ready_count_and_moectl_does_not_scale_twice(rehearsal):
    r = rehearsal
    generation, num_actions = r.generation("decode"), len(r.pools.actions("decode"))
    node = next(p.spec.node_name for p in r.pods("decode"))
    lost = [p.metadata.name for p in r.pods("decode") if p.spec.node_name == node]
    # the node goes; the pod garbage collector deletes its pods after a 40 s quarantine: done here at once
    r.fleet.remove_node(node)
    for name in lost:
        r.core.delete_namespaced_pod(name, r.namespace, grace_period_seconds=0)
    until("the ReplicaSet to replace the pod, unplaceable on a full fleet", lambda: any(
        any(c.reason == "Unschedulable" for c in p.status.conditions or []) for p in r.pods("decode")), WAIT_S)
    for _ in range(3):
        r.pass_("decode")
    assert r.generation("decode") == generation  # no write: the size stands, the platform re-places
    assert len(r.pools.actions("decode")) == num_actions
    assert len(r.events("decode", "Unschedulable")) == 1


def test_4_a_leader_killed_mid_change_the_next_finishes_with_no_second_write(rehearsal):
    r = rehearsal
    generation = r.generation("decode")
    # the leader writes the scale, then dies before its transaction commits: nothing of the pass is recorded
    with pytest.raises(RuntimeError, match="killed"), r.pools.sessions() as session, session.begin():
        deployment = deployments.get(session, "tiny")
        pool = deployments.get_pool(session, deployment, "decode")
        requests.record(session, pool, requests.Ask(POOL_SIZE.kind, "manual", "alice", value={"replicas": 40}),
                        now=r.pools.now)
        Reconciler(r.pools.settings, r.pools.scaler).reconcile_pool(session, deployment, pool, now=r.pools.now + 1)
        raise RuntimeError("leader killed")
    assert r.generation("decode") == generation + 1  # the write reached the apiserver
    r.pass_("decode", replicas=40)  # the new leader: the same size asked again and recorded
    assert r.generation("decode") == generation + 1  # no second write
    last = r.pools.actions("decode")[-1]
    assert last.measured["replicas_applied"] == 40 and last.measured["found_applied"]


def test_5_a_persons_kubectl_scale_and_an_hpa_are_seen_reported_and_not_fought(rehearsal):
    r = rehearsal
    r.apps.patch_namespaced_deployment_scale("decode", r.namespace, {"spec": {"replicas": 38}},
                                             field_manager="kubectl")
    generation = r.generation("decode")
    for _ in range(2):
        r.pass_("decode")
    conflict = r.pools.actions("decode")[-1]
    assert conflict.status == "conflict" and conflict.inputs["writer"] == "kubectl"
    assert r.generation("decode") == generation and len(r.events("decode", "ScaleConflict")) == 1

    hpa = kubernetes.client.V2HorizontalPodAutoscaler(
        metadata=kubernetes.client.V1ObjectMeta(name="prefill"),
        spec=kubernetes.client.V2HorizontalPodAutoscalerSpec(
            scale_target_ref=kubernetes.client.V2CrossVersionObjectReference(
                api_version="leaderworkerset.x-k8s.io/v1", kind="LeaderWorkerSet", name="prefill"),
            min_replicas=1, max_replicas=30))
    AutoscalingV2Api(r.admin).create_namespaced_horizontal_pod_autoscaler(r.namespace, hpa)
    generation = r.generation("prefill")
    r.pass_("prefill", replicas=20)
    conflict = r.pools.actions("prefill")[-1]
    assert conflict.status == "conflict" and "HorizontalPodAutoscaler" in conflict.reason
    assert r.generation("prefill") == generation
