"""Two and three real controller replicas (`python -m controlplane serve`) sharing one PostgreSQL, electing
through a Lease in the real apiserver or through the database: only the leader writes (every action carries
the leader that wrote it, requests served by another replica wait for the leader's pass); a leader killed
with SIGKILL is replaced within the lease; a leader paused past its lease (SIGSTOP), then resumed, writes
nothing more, to the database or to the scale target."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path

import pytest
from kubernetes.client import AppsV1Api, CoordinationV1Api
from support.controllers import LEASE_SECONDS, RETRY_SECONDS, leader, register, replica, written
from support.kube.controller import controller_kubeconfig, grant_controller
from support.kube.objects import deployment
from support.servers import create_database, until

from controlplane.config import KubeScaleTarget
from controlplane.store.db import upgrade

POLICY = {"mode": "auto", "cooldown_seconds": 0, "replicas": {"decode": {"min": 1, "max": 9}}}
# the candidate sees the leader's last renewal at most a retry period late, and acts at most one after the
# lease: on 2 busy cores a second more for processes to be scheduled
MAX_TAKEOVER_SECONDS = LEASE_SECONDS + 2 * RETRY_SECONDS + 1.0
HOLD_SECONDS = 1.1  # a size applied is in flight for a window (1 s): the next one waits that long


def applied(database_url: str, replicas: int) -> bool:
    return any(w.replicas == replicas and w.status in ("applied", "verified") for w in written(database_url))


def elect_write_kill_pause(database_url: str, env: dict[str, str], workdir: Path, holder: Callable[[], str | None],
                           target_replicas: Callable[[], int] | None = None) -> dict[str, float]:
    """The scenario both elections go through. Returns what it measured (seconds)."""
    upgrade(database_url)  # what the chart's migration Job does before the replicas start
    measured = {}
    with ExitStack() as stack:
        a = stack.enter_context(replica("a", env, workdir))
        until("a to lead", lambda: holder() == "a", 30, interval=0.1)
        b = stack.enter_context(replica("b", env, workdir))
        register(b.url, POLICY)

        # only the leader writes: b records what it is asked, a's next pass handles it
        assert b.ask_size(2)["decision"] == "pending"
        until("the leader to handle the request b recorded", lambda: applied(database_url, 2), 10, interval=0.1)
        time.sleep(HOLD_SECONDS)
        asked = time.monotonic()
        answer = a.ask_size(3)
        measured["ask_on_the_leader"] = time.monotonic() - asked
        assert answer["decision"] == "resize" and answer["action"]["status"] == "applied"
        assert {w.leader for w in written(database_url)} == {"a#0"}
        if target_replicas:
            assert target_replicas() == 3
        assert a.is_leading() and not b.is_leading()

        # kill -9 the leader: b takes over within the lease
        killed = time.monotonic()
        a.kill()
        until("b to take over", lambda: holder() == "b", 3 * LEASE_SECONDS, interval=0.05)
        measured["takeover_after_kill"] = time.monotonic() - killed
        assert measured["takeover_after_kill"] <= MAX_TAKEOVER_SECONDS, measured
        until("b to act as leader", b.is_leading, 10, interval=0.1)
        assert b.ask_size(4)["action"]["status"] == "applied"
        assert written(database_url)[-1].leader == "b#1"

        # pause b past its lease: c takes over, and b, resumed, writes nothing
        c = stack.enter_context(replica("c", env, workdir))
        b.pause()
        until("c to take over from the paused b", lambda: holder() == "c", 3 * LEASE_SECONDS + 5, interval=0.1)
        until("c to act as leader", c.is_leading, 10, interval=0.1)
        time.sleep(HOLD_SECONDS)
        assert c.ask_size(5)["action"]["status"] == "applied"
        resumed = time.time()
        b.resume()
        for i, size in enumerate((2, 3, 4)):  # work for whoever leads, asked of both
            time.sleep(HOLD_SECONDS)
            answer = (b if i % 2 == 0 else c).ask_size(size)
            assert answer["decision"] == ("pending" if i % 2 == 0 else "resize"), answer
            until(f"size {size} to be handled", lambda size=size: applied(database_url, size) and
                  written(database_url)[-1].replicas == size, 10, interval=0.1)
        time.sleep(2 * RETRY_SECONDS + 1)  # more of b's passes and renewals after it resumed
        after = [w for w in written(database_url) if w.created_at >= resumed]
        assert len(after) == 3 and {w.leader for w in after} == {"c#2"}, after
        assert holder() == "c" and not b.is_leading() and c.is_leading()
        if target_replicas:
            assert target_replicas() == 4
        assert "no longer leads" in b.log.read_text()
    return measured


@pytest.mark.slow
@pytest.mark.postgres
def test_two_controllers_elect_through_the_database(postgres_server, tmp_path):
    url = create_database(*postgres_server, f"t{uuid.uuid4().hex[:12]}")
    measured = elect_write_kill_pause(url, {"MOECTL_DATABASE_URL": url}, tmp_path, lambda: leader(url))
    print(f"database election: {measured}")


@pytest.mark.postgres
def test_two_controllers_elect_through_a_lease_and_scale_a_deployment(kube_cluster, kube_namespace,
                                                                       postgres_server, tmp_path):
    url = create_database(*postgres_server, f"t{uuid.uuid4().hex[:12]}")
    target = KubeScaleTarget(deployment="tiny", role="decode", namespace=kube_namespace, kind="Deployment",
                             name="decode")
    with kube_cluster.api_client() as admin:
        AppsV1Api(admin).create_namespaced_deployment(kube_namespace, deployment("decode", replicas=1))
        grant_controller(kube_cluster, kube_namespace, [target], lease_name="moectl-leader")
        env = {"MOECTL_DATABASE_URL": url, "MOECTL_LEASE_NAME": "moectl-leader",
               "MOECTL_LEASE_NAMESPACE": kube_namespace, "MOECTL_POD_NAMESPACE": kube_namespace,
               "MOECTL_KUBECONFIG": str(controller_kubeconfig(kube_cluster, kube_namespace, tmp_path / "kubeconfig")),
               "MOECTL_KUBE_SCALE_TARGETS": json.dumps([target.model_dump(by_alias=True)])}

        def holder() -> str | None:
            leases = CoordinationV1Api(admin).list_namespaced_lease(kube_namespace).items
            return next((lease.spec.holder_identity for lease in leases if lease.metadata.name == "moectl-leader"),
                        None)

        def replicas() -> int:
            return AppsV1Api(admin).read_namespaced_deployment("decode", kube_namespace).spec.replicas

        measured = elect_write_kill_pause(url, env, tmp_path, holder, replicas)
    print(f"lease election: {measured}")
