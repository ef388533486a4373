"""Agents post one snapshot per window and get the desired state back.

A snapshot naming a placement version the store never issued (the database was restored or replaced while
the fleet ran on) is refused with code PLACEMENT_UNKNOWN until it carries the table the rank runs; then that
table is adopted as that version (`actuate.change.adopt`) and the window is stored like any other."""

from __future__ import annotations

from fastapi import APIRouter, HTTPException
from fastapi.responses import JSONResponse
from sqlalchemy.exc import IntegrityError

from agents.protocol import DesiredState, PlacementTable, RoutingLimits, Snapshot
from controlplane.actuate import change
from controlplane.actuate.agents import desired_state
from controlplane.actuate.placement import PLACEMENT
from controlplane.api.deps import AgentDep, Caller, NowDep, SessionDep, SettingsDep
from controlplane.collect.aggregate import to_report
from controlplane.collect.validate import PoolShape, SnapshotRejected, check_snapshot
from controlplane.store import deployments, placements, policies, routing_limits, windows

router = APIRouter(prefix="/v1/agents", tags=["agents"])


@router.post("/snapshot", response_model=DesiredState, response_model_exclude_none=True)
def post_snapshot(snapshot: Snapshot, session: SessionDep, settings: SettingsDep, now: NowDep,
                  caller: AgentDep) -> DesiredState | JSONResponse:
    """Stores one rank's window and answers with what the rank should run next."""
    try:
        try:
            with session.begin():
                return _ingest(snapshot, session, settings, now, caller)
        except IntegrityError:
            pass  # two ranks created the same pool, agent, window or adopted version at once: the retry finds it
        with session.begin():
            return _ingest(snapshot, session, settings, now, caller)
    except SnapshotRejected as exc:
        return JSONResponse(status_code=exc.status,
                            content={"detail": str(exc)} | ({"code": exc.code} if exc.code else {}))


def _ingest(snapshot: Snapshot, session, settings, now: float, caller: Caller) -> DesiredState:
    ident = snapshot.identity
    deployment = deployments.get(session, ident.deployment)
    if deployment is None:
        raise HTTPException(404, f"deployment {ident.deployment!r} is not registered; create it with "
                                 f"PUT /v1/deployments/{ident.deployment} (a worker started with --api-token does)")
    pool = deployments.get_pool(session, deployment, ident.role.value)
    latest = placements.latest(session, pool) if pool else None
    check_snapshot(snapshot, deployments.model_of(deployment),
                   PoolShape(pool.ep_size, pool.slots_per_rank) if pool else None,
                   latest.version if latest else 0, now, settings.max_snapshot_age_seconds)
    if pool is None:
        pool = deployments.create_pool(session, deployment=deployment, identity=ident, now=now)
        latest = placements.latest(session, pool)
    _, policy = policies.active(session, deployment)
    if snapshot.placement_version > latest.version:  # checked: it carries the table the rank runs
        deployments.lock_pool(session, pool)  # as every writer of the pool: the loop cannot issue this number now
        latest = placements.latest(session, pool)
    if snapshot.placement_version > latest.version:  # nobody issued or adopted it meanwhile
        running = snapshot.running_placement
        table = PlacementTable(running.slot_to_expert.to_numpy(),
                               running.slot_share.to_numpy() if running.slot_share is not None else None)
        change.adopt(session, PLACEMENT, deployment=deployment, pool=pool, version=snapshot.placement_version,
                     value=table, policy=policy, reported_by=f"{ident.instance} rank {ident.rank}",
                     created_by=caller.name, now=now)
        latest = placements.latest(session, pool)
    report = to_report(snapshot, settings.window_seconds)
    num_windows = deployments.record_agent(session, pool=pool, identity=ident, window_index=report.window_index,
                                           placement_version=snapshot.placement_version, now=now)
    # a new rank's first windows start mid-window on cold caches: counted as fresh, not as load
    if num_windows > settings.warmup_windows:
        try:
            windows.add_report(session, pool=pool, report=report, report_version=snapshot.placement_version,
                               current_version=latest.version, grid_seconds=settings.window_seconds,
                               empty=deployments.zeros_for(deployment, pool))
        except windows.WindowOverflow as exc:
            raise HTTPException(422, str(exc)) from None
    return desired_state(placement_version=latest.version, slot_to_expert=latest.slot_to_expert,
                         slot_share=latest.slot_share, reported_version=snapshot.placement_version,
                         routing=RoutingLimits(topk_group=routing_limits.latest(session, pool).topk_group),
                         local_prefill_threshold=policy.local_prefill_threshold,
                         window_seconds=settings.window_seconds)
