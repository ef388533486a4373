"""The group snapshot endpoint (moectl.v2): one post per EP group files exactly what its ranks' own posts
(moectl.v1) would, concurrent posts included, and keeps the data hygiene of per-rank ingest: warm-up windows,
retries counted once, slot load only from ranks on the window's placement, old and new bodies each refused
at the other's endpoint."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from fastapi.testclient import TestClient
from prometheus_client import CollectorRegistry
from sqlalchemy import func, select
from support.auth import agent, operator

from agents.protocol import GroupSnapshot, LatencySummary, ServingCounters, Snapshot
from agents.sim.fleet import DEFAULT_MODEL, make_fleet
from controlplane.api.app import create_app
from controlplane.loop.telemetry import ControllerMetrics
from controlplane.observed.window import GROUPS_AT, NODES_AT
from controlplane.store import deployments, windows
from controlplane.store.knobs import PLACEMENT
from controlplane.store.observed_tables import Agent, LoadWindow, ReplicaWindow
from controlplane.store.tables import Deployment, Pool

EP_SIZE, SLOTS = 8, 10


def register(client, name: str) -> None:
    response = client.put(f"/v1/deployments/{name}", json={"model": DEFAULT_MODEL.model_dump()}, headers=operator())
    assert response.status_code == 200, response.text


def post(client, body: Snapshot | GroupSnapshot):
    path = "/v2/agents/snapshot" if isinstance(body, GroupSnapshot) else "/v1/agents/snapshot"
    return client.post(path, content=body.model_dump_json(), headers=agent() | {"Content-Type": "application/json"})


def rank_windows(clock, num_windows: int, num_instances: int = 2) -> list[list[Snapshot]]:
    """The ranks' v1 snapshots of every instance (deployment 'ranks') for each window."""
    fleet = make_fleet(num_instances, EP_SIZE, SLOTS, seed=5)
    by_window = []
    for w in range(num_windows):
        start = clock.now - 10 * (num_windows - w)
        snapshots = []
        for i, instance in enumerate(fleet):
            snapshots += [s.model_copy(update={"identity": s.identity.model_copy(
                update={"deployment": "ranks", "instance": f"decode-{i}"})}) for s in instance.window(start, 10.0)]
        by_window.append(snapshots)
    return by_window


def as_groups(snapshots: list[Snapshot]) -> list[GroupSnapshot]:
    """The same windows as each instance's rank 0 posts them (deployment 'groups')."""
    by_instance: dict[str, list[Snapshot]] = {}
    for s in snapshots:
        by_instance.setdefault(s.identity.instance, []).append(s)
    return [GroupSnapshot.gather(ranks).model_copy(update={"deployment": "groups"}) for ranks in by_instance.values()]


def stored_windows(sessions, name: str) -> list:
    with sessions() as session:
        deployment = deployments.get(session, name)
        pool = deployments.get_pool(session, deployment, "decode")
        return windows.recent(session, pool, before_index=2**31 - 1, limit=100)


def test_group_posts_file_the_same_windows_as_their_ranks_posts_concurrently(client, sessions, clock):
    register(client, "ranks")
    register(client, "groups")
    by_window = rank_windows(clock, num_windows=3)
    with ThreadPoolExecutor(8) as pool:  # a window's posts all at once (each agent posts its windows in order)
        for snapshots in by_window:
            posts = [*snapshots, *as_groups(snapshots)]
            assert list(pool.map(lambda b: post(client, b).status_code, posts)) == [200] * len(posts)
    per_rank, grouped = stored_windows(sessions, "ranks"), stored_windows(sessions, "groups")
    assert len(per_rank) == len(grouped) == 3
    for a, b in zip(per_rank, grouped, strict=True):
        np.testing.assert_array_equal(a.expert_tokens, b.expert_tokens)
        np.testing.assert_array_equal(a.slot_tokens, b.slot_tokens)
        assert (a.num_reports, a.num_slot_reports) == (b.num_reports, b.num_slot_reports) == (2 * EP_SIZE,) * 2
        assert a.counters.keys() == b.counters.keys()
        assert {f"{GROUPS_AT}0", f"{NODES_AT}0"} <= b.counters.keys()  # each rank's routing reach, summed
        for name in a.counters:
            assert a.counters[name] == pytest.approx(b.counters[name]), name
        assert b.imbalance(EP_SIZE) == pytest.approx(a.imbalance(EP_SIZE))
    with sessions() as session:  # every rank is an agent, however it reported
        assert session.scalar(select(func.count()).select_from(Agent)) == 2 * 2 * EP_SIZE


def test_a_retried_group_post_counts_once(client, sessions, clock):
    register(client, "groups")
    [group, _] = as_groups(rank_windows(clock, 1)[0])
    assert post(client, group).status_code == 200
    assert post(client, group).status_code == 200  # the answer was lost: the same window again
    [window] = stored_windows(sessions, "groups")
    assert window.num_reports == EP_SIZE
    np.testing.assert_array_equal(window.expert_tokens, group.expert_tokens.to_numpy())


def test_a_new_groups_first_window_is_warm_up(settings, sessions, clock):
    app = create_app(settings.model_copy(update={"warmup_windows": 1}), sessions, clock=clock,
                     metrics=ControllerMetrics(CollectorRegistry()))
    with TestClient(app) as client:
        register(client, "groups")
        first, second = (as_groups(snapshots)[0] for snapshots in rank_windows(clock, 2, num_instances=1))
        assert post(client, first).status_code == 200
        with sessions() as session:
            assert session.scalar(select(func.count()).select_from(LoadWindow)) == 0
            assert session.scalar(select(func.count()).select_from(Agent)) == EP_SIZE  # fresh, not yet load
        assert post(client, second).status_code == 200
    [window] = stored_windows(sessions, "groups")
    assert window.start == second.window_start and window.num_reports == EP_SIZE


def test_a_rank_on_another_placement_adds_its_expert_load_but_not_its_slot_load(client, sessions, clock):
    register(client, "groups")
    [group, _] = as_groups(rank_windows(clock, 1)[0])
    assert post(client, group).status_code == 200  # creates the pool at version 0
    with sessions() as session, session.begin():
        pool = deployments.get_pool(session, deployments.get(session, "groups"), "decode")
        table = PLACEMENT.versions.latest(session, pool).value
        PLACEMENT.versions.add(session, pool=pool, version=1, value=table, action_id=None, now=clock.now)
    later = group.model_copy(update={"window_start": group.window_start + 10, "ranks": [
        r.model_copy(update={"placement_version": 0 if r.rank == 3 else 1}) for r in group.ranks]})
    answer = post(client, later)
    assert answer.status_code == 200 and answer.json()["slot_to_expert"]  # the group runs mixed: the table again
    window = stored_windows(sessions, "groups")[-1]
    assert window.placement_version == 1 and (window.num_reports, window.num_slot_reports) == (EP_SIZE, EP_SIZE - 1)
    assert not window.slot_tokens[:, 3 * SLOTS:4 * SLOTS].any() and window.slot_tokens[:, :3 * SLOTS].any()
    assert window.imbalance(EP_SIZE) is None  # rank 3's GPU would read as idle


def test_each_endpoint_refuses_the_other_protocol_and_unissued_versions(client, sessions, clock):
    register(client, "groups")
    snapshots = rank_windows(clock, 1, num_instances=1)[0]
    [group] = as_groups(snapshots)
    to_v2 = client.post("/v2/agents/snapshot", content=snapshots[0].model_dump_json(),
                        headers=agent() | {"Content-Type": "application/json"})
    assert to_v2.status_code == 422 and "/v1/agents/snapshot" in to_v2.json()["detail"]
    to_v1 = client.post("/v1/agents/snapshot", content=group.model_dump_json(),
                        headers=agent() | {"Content-Type": "application/json"})
    assert to_v1.status_code == 422 and "post it to /v2/agents/snapshot" in to_v1.json()["detail"]
    ahead = group.model_copy(update={"ranks": [r.model_copy(update={"placement_version": 4 if r.rank == 6 else 0})
                                               for r in group.ranks]})
    refused = post(client, ahead)
    assert refused.status_code == 409 and "rank 6 ran placement_version 4 was never issued" in refused.json()["detail"]
    with sessions() as session:
        assert session.scalar(select(func.count()).select_from(LoadWindow)) == 0


@pytest.mark.parametrize("field, value", [("node", "n" * 257), ("gpu_uuid", "GPU\x00"), ("placement_version", 2**31),
                                          ("gpus_per_node", 2**31), ("instance", "decode\x00")])
def test_a_group_post_is_bounded_as_rank_posts_are(client, sessions, clock, field, value):
    """Each field a group post shares with a v1 snapshot has the v1 bound: 422 naming it, nothing stored."""
    register(client, "groups")
    [group] = as_groups(rank_windows(clock, 1, num_instances=1)[0])
    body = group.model_dump(mode="json")
    if field in body["ranks"][0]:
        body["ranks"][0][field] = value
    else:
        body[field] = value
    refused = client.post("/v2/agents/snapshot", json=body, headers=agent())
    assert refused.status_code == 422 and field in refused.text, refused.text
    with sessions() as session:
        assert session.scalar(select(func.count()).select_from(LoadWindow)) == 0


def test_a_group_post_files_its_ranks_serving_counters_as_their_posts_do(client, sessions, clock):
    """The pool planner's per-instance window (serving counters, TTFT, ITL) is the same from a group's rows
    as from its ranks' own posts, past the warm-up windows and in them."""
    register(client, "ranks")
    register(client, "groups")
    for w, snapshots in enumerate(rank_windows(clock, num_windows=3, num_instances=1)):
        served = [s.model_copy(update={"serving": ServingCounters(
            busy_seconds=4.0 + s.identity.rank, prefill_tokens=100 * (w + 1), num_prefilled=w + s.identity.rank,
            batch_mean=1.5, kv_tokens_mean=300.0, kv_capacity_tokens=8192, max_batch=32),
            "itl": LatencySummary(count=50, sum=1.5, p50=0.02, p90=0.03 + 0.01 * s.identity.rank, p99=0.05)})
            for s in snapshots]
        for body in [*served, *as_groups(served)]:
            assert post(client, body).status_code == 200
    with sessions() as session:
        rows = {(name, w.window_index): w for name, w in session.execute(
            select(Deployment.name, ReplicaWindow).join(Pool, Pool.id == ReplicaWindow.pool_id)
            .join(Deployment, Deployment.id == Pool.deployment_id))}
    by_rank = {index: w for (name, index), w in rows.items() if name == "ranks"}
    by_group = {index: w for (name, index), w in rows.items() if name == "groups"}
    assert by_rank.keys() == by_group.keys() and len(by_rank) == 3
    for index, ranked in by_rank.items():
        grouped = by_group[index]
        assert (grouped.num_reports, grouped.age_windows) == (ranked.num_reports, ranked.age_windows)
        assert grouped.counters == pytest.approx(ranked.counters)
        assert grouped.counters["busy_seconds"] == 4.0 + EP_SIZE - 1  # lockstep ranks: the instance's is the max
        assert grouped.counters["itl_p90"] == pytest.approx(0.03 + 0.01 * (EP_SIZE - 1))


def test_an_adapters_faults_show_the_instance_unhealthy_and_why_until_a_clean_window(client, clock):
    """Issue 40: a sidecar's failures (engine restarted, windows not posted, plugin faults) reached no one."""
    register(client, "groups")
    first, second = (as_groups(snapshots)[0] for snapshots in rank_windows(clock, 2, num_instances=1))
    faulty = first.model_copy(update={"adapter_faults": {"engine restarted": 1, "plugin: load not recorded": 3}})
    assert post(client, faulty).status_code == 200
    agents = client.get("/v1/deployments/groups/overview", headers=operator()).json()["pools"][0]["agents"]
    assert agents["unhealthy"] == ["decode-0: engine restarted x1, plugin: load not recorded x3"]
    assert "adapter_faults" not in second.model_dump(mode="json")  # absent: reads as before the field existed
    assert post(client, second).status_code == 200
    agents = client.get("/v1/deployments/groups/overview", headers=operator()).json()["pools"][0]["agents"]
    assert agents["unhealthy"] == []
    bad = second.model_copy(update={"adapter_faults": {"x\x00": 1}})
    assert post(client, bad).status_code == 422
