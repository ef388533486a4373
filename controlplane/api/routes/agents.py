"""Agents post their windows and get the desired state back: one rank's snapshot (moectl.v1) or one EP group's
(moectl.v2, agents/protocol/group.py). Both are checked, recorded per rank and summed into the pool's window
the same way; a group's post costs one request, one read of its agents and one write of the window. Routers
post their window and get the PD-aware local-prefill threshold back.

A post may name a placement version the store never issued (the database was restored or replaced while the
fleet ran on). It is refused with code PLACEMENT_UNKNOWN until it carries the table it runs (a group's rank 0
sends the table of the newest version its ranks ran). Then that table is adopted as that version
(`api.actuation` `adopt_placement`) and the window is stored like any other."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from fastapi import APIRouter, HTTPException
from fastapi.responses import JSONResponse
from sqlalchemy.exc import IntegrityError

from agents.protocol import (
    DesiredState,
    GroupSnapshot,
    Identity,
    ModelShape,
    PlacementTable,
    RouterState,
    RouterWindow,
    RoutingLimits,
    RunningPlacement,
    Snapshot,
)
from agents.protocol.grid import window_index
from controlplane.api.actuation import Actuation, Running
from controlplane.api.deps import ActuationDep, AgentDep, Caller, NowDep, SessionDep, SettingsDep
from controlplane.api.desired_state import desired_state
from controlplane.collect.aggregate import to_group_report, to_report
from controlplane.collect.serving import replica_counters, router_counters
from controlplane.collect.validate import PoolShape, SnapshotRejected, check_group, check_snapshot, check_window_time
from controlplane.observed.report import Report
from controlplane.observed.serving import merge
from controlplane.store import (
    deployments,
    in_force,
    policies,
    prefill_thresholds,
    serving,
    windows,
)
from controlplane.store.deployments import AgentSeen
from controlplane.store.knobs import CAPACITY_FACTOR, PLACEMENT, ROUTING

router = APIRouter(tags=["agents"])
# the pool's one-number knobs in force (store/in_force.py `InForce.knobs`) -> their field of the agents' answer
LIMIT_FIELDS = {ROUTING.kind: "topk_group", CAPACITY_FACTOR.kind: "expert_capacity_factor"}
T = TypeVar("T")


@dataclass(frozen=True)
class _Post:
    """What ingest needs of a post, whichever protocol it came in."""

    identity: Identity  # the poster (a group: its rank 0), for the pool its first post creates
    check: Callable[[ModelShape, PoolShape | None, int], None]  # model, pool, latest version; SnapshotRejected
    report: Callable[[float], Report]  # grid seconds -> the post's share of its window
    seen: list[AgentSeen]  # the ranks it reports for
    placement_version: int  # the newest placement its ranks ran
    running_placement: RunningPlacement | None  # the table placement_version names, after a PLACEMENT_UNKNOWN
    reported_by: str  # who ran it, for the adopted version's audit
    serving: list[dict[str, float] | None]  # each rank's serving counters (None: it does not measure them)
    adapter_faults: dict[str, int] | None | bool = False  # a group's adapter's failures in its window; False: v1


@router.post("/v1/agents/snapshot", response_model=DesiredState, response_model_exclude_none=True)
def post_snapshot(snapshot: Snapshot, session: SessionDep, settings: SettingsDep, now: NowDep,
                  actuation: ActuationDep, caller: AgentDep) -> DesiredState | JSONResponse:
    """Stores one rank's window (moectl.v1) and answers with what the rank should run next."""
    ident = snapshot.identity
    post = _Post(ident, lambda model, pool, latest: check_snapshot(snapshot, model, pool, latest, now,
                                                                   settings.max_snapshot_age_seconds),
                 lambda grid: to_report(snapshot, grid),
                 [AgentSeen(ident.rank, snapshot.placement_version, ident.node, ident.gpu_uuid)],
                 snapshot.placement_version, snapshot.running_placement, f"{ident.instance} rank {ident.rank}",
                 [replica_counters(snapshot)])
    return _store(post, session, settings, now, actuation, caller)


@router.post("/v2/agents/snapshot", response_model=DesiredState, response_model_exclude_none=True)
def post_group_snapshot(group: GroupSnapshot, session: SessionDep, settings: SettingsDep, now: NowDep,
                        actuation: ActuationDep, caller: AgentDep) -> DesiredState | JSONResponse:
    """Stores one EP group's window (moectl.v2, posted by its rank 0) and answers with what every rank of the
    group should run next."""
    rank0 = min(group.ranks, key=lambda r: r.rank)
    ahead = max(group.ranks, key=lambda r: r.placement_version)
    ident = Identity(deployment=group.deployment, instance=group.instance, role=group.role, rank=0,
                     ep_size=group.ep_size, slots_per_rank=group.slots_per_rank, gpus_per_node=group.gpus_per_node,
                     node=rank0.node, gpu_uuid=rank0.gpu_uuid)
    post = _Post(ident, lambda model, pool, latest: check_group(group, model, pool, latest, now,
                                                                settings.max_snapshot_age_seconds),
                 lambda grid: to_group_report(group, grid),
                 [AgentSeen(r.rank, r.placement_version, r.node, r.gpu_uuid) for r in group.ranks],
                 group.placement_version, group.running_placement, f"{group.instance} rank {ahead.rank}",
                 [replica_counters(r) for r in group.ranks], group.adapter_faults)
    return _store(post, session, settings, now, actuation, caller)


def _once_more_on_conflict(session, ingest: Callable[[], T]) -> T:
    """ingest() in a transaction, and once more if it lost a race to create a row (two ranks creating the same
    pool, agent, window or adopted version; one window posted twice at once): the retry finds that row."""
    try:
        with session.begin():
            return ingest()
    except IntegrityError:
        pass
    with session.begin():
        return ingest()


def _store(post: _Post, session, settings, now: float, actuation: Actuation,
           caller: Caller) -> DesiredState | JSONResponse:
    try:
        return _once_more_on_conflict(session, lambda: _ingest(post, session, settings, now, actuation, caller))
    except SnapshotRejected as exc:
        return JSONResponse(status_code=exc.status,
                            content={"detail": str(exc)} | ({"code": exc.code} if exc.code else {}))


def _ingest(post: _Post, session, settings, now: float, actuation: Actuation, caller: Caller) -> DesiredState:
    ident = post.identity
    # what the answer needs, read in one round trip before the window's row is locked: the pool's other
    # instances post this window at once and wait for that lock only as long as this post still writes
    state = in_force.read(session, ident.deployment, ident.role.value)
    if state is None:
        raise HTTPException(404, f"deployment {ident.deployment!r} is not registered; create it with "
                                 f"PUT /v1/deployments/{ident.deployment} (a worker started with --api-token does)")
    deployment, pool, latest = state.deployment, state.pool, state.placement
    post.check(deployments.model_of(deployment), PoolShape(pool.ep_size, pool.slots_per_rank) if pool else None,
               latest.version if latest else 0)
    if pool is None:
        deployments.create_pool(session, deployment=deployment, identity=ident, now=now)
        state = in_force.read(session, ident.deployment, ident.role.value)
        pool, latest = state.pool, state.placement
    if post.placement_version > latest.version:  # checked: it carries the table its ranks run
        deployments.lock_pool(session, pool)  # as every writer of the pool: the loop cannot issue this number now
        latest = PLACEMENT.versions.latest(session, pool)
    if post.placement_version > latest.version:  # nobody issued or adopted it meanwhile
        running = post.running_placement
        table = PlacementTable(running.slot_to_expert.to_numpy(),
                               running.slot_share.to_numpy() if running.slot_share is not None else None)
        actuation.adopt_placement(session, pool, Running(table, post.placement_version, post.reported_by),
                                  policy=state.policy, created_by=caller.name, now=now)
        latest = PLACEMENT.versions.latest(session, pool)
    threshold = state.local_prefill_threshold
    routing = RoutingLimits(**{LIMIT_FIELDS[kind]: value for kind, value in state.knobs.items()})
    report = post.report(settings.window_seconds)
    num_windows = deployments.record_agents(session, pool=pool, instance=ident.instance, seen=post.seen,
                                            window_index=report.window_index, now=now,
                                            adapter_faults=post.adapter_faults)
    # a new rank's first windows start mid-window on cold caches: counted as fresh, not as load (a group's
    # expert load is one sum over its ranks: it counts once all of them are past their first windows)
    if min(num_windows) > settings.warmup_windows:
        try:
            windows.add_report(session, pool=pool, report=report, current_version=latest.version,
                               grid_seconds=settings.window_seconds, empty=deployments.zeros_for(deployment, pool))
        except windows.WindowOverflow as exc:
            raise HTTPException(422, str(exc)) from None
    counters = [c for c in post.serving if c is not None]
    if counters and min(num_windows) > 0:  # every window, the cold ones too: the planner skips those by age
        serving.add_replica_report(session, pool=pool, instance=ident.instance, window_index=report.window_index,
                                   age_windows=min(num_windows) - 1, counters=functools.reduce(merge, counters),
                                   num_reports=len(counters))
    versions = {seen.placement_version for seen in post.seen}
    table = latest.value
    return desired_state(placement_version=latest.version, slot_to_expert=table.slot_to_expert,
                         slot_share=table.slot_share, reported_version=versions.pop() if len(versions) == 1 else -1,
                         routing=routing, local_prefill_threshold=threshold, window_seconds=settings.window_seconds)


@router.post("/v1/agents/router-window", response_model=RouterState, response_model_exclude_none=True)
def post_router_window(window: RouterWindow, session: SessionDep, settings: SettingsDep, now: NowDep,
                       _: AgentDep) -> RouterState:
    """Stores one router's window (arrivals, lengths, end-to-end latencies: what the pool planner sizes pools
    from) and answers with the threshold the router should route by. A window posted twice is kept once."""
    return _once_more_on_conflict(session, lambda: _ingest_router(window, session, settings, now))


def _ingest_router(window: RouterWindow, session, settings, now: float) -> RouterState:
    deployment = deployments.get(session, window.deployment)
    if deployment is None:
        raise HTTPException(404, f"deployment {window.deployment!r} is not registered; its workers register it "
                                 f"(PUT /v1/deployments/{window.deployment})")
    try:
        check_window_time(window.window_start, window.window_seconds, now, settings.max_snapshot_age_seconds)
    except SnapshotRejected as exc:
        raise HTTPException(exc.status, str(exc)) from None
    serving.add_router_window(session, deployment=deployment, router=window.router,
                              window_index=window_index(window.window_start, settings.window_seconds),
                              window_seconds=window.window_seconds, counters=router_counters(window))
    _, policy = policies.active(session, deployment)
    threshold = prefill_thresholds.in_force(session, deployments.get_pool(session, deployment, "decode"), policy)
    return RouterState(local_prefill_threshold=threshold, window_seconds=settings.window_seconds)
