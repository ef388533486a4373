"""Deployments: register, list, overview, and the one explicit way to change the engine a deployment runs."""

from __future__ import annotations

from fastapi import APIRouter, HTTPException
from pydantic import BaseModel, Field
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from controlplane.api import overview
from controlplane.api.deps import AdminDep, DeploymentName, NowDep, PoolRole, SessionDep, SettingsDep, ViewerDep
from controlplane.api.overview_schemas import Overview
from controlplane.api.schemas import DeploymentIn, DeploymentSummary, PoolLoad
from controlplane.plan.engines import EngineName
from controlplane.store import audit, deployments, pools
from controlplane.store.knobs import PLACEMENT
from controlplane.store.tables import Deployment

router = APIRouter(prefix="/v1/deployments", tags=["deployments"])


def get_or_404(session: Session, name: str) -> Deployment:
    deployment = deployments.get(session, name)
    if deployment is None:
        raise HTTPException(404, f"deployment {name!r} not found; GET /v1/deployments lists them")
    return deployment


@router.get("", response_model=list[DeploymentSummary])
def list_deployments(session: SessionDep, settings: SettingsDep, now: NowDep, _: ViewerDep) -> list[DeploymentSummary]:
    out = []
    for deployment in deployments.list_all(session):
        view = overview.build(session, deployment, settings, now, num_actions=0)
        out.append(DeploymentSummary(name=view.deployment, model=view.model, mode=view.mode,
                                     imbalance=view.imbalance, agents=view.agents))
    return out


@router.put("/{name}", status_code=200)
def put_deployment(name: DeploymentName, body: DeploymentIn, session: SessionDep, now: NowDep,
                   caller: AdminDep) -> dict:
    """Registers a deployment (idempotent for the same model shape). The shape cannot change in place:
    placements and windows are sized by it."""
    try:
        with session.begin():
            if _is_registered(session, name, body):
                return {"name": name, "created": False}
            deployments.create(session, name=name, model=body.model, policy=body.policy, created_by=caller.name,
                               now=now, engine=body.engine)
    except IntegrityError:  # registered concurrently (every rank of a new instance may try): same answer
        with session.begin():
            if _is_registered(session, name, body):
                return {"name": name, "created": False}
        raise
    return {"name": name, "created": True}


def _is_registered(session: Session, name: str, body: DeploymentIn) -> bool:
    """True if `name` exists with this model shape and engine; 409 if with another (the engine sets the planner's
    rails: a re-registration never changes it silently; PUT .../engine does, audited)."""
    existing = deployments.get(session, name)
    if existing is not None and deployments.model_of(existing) != body.model:
        raise HTTPException(409, f"deployment {name!r} exists with another model shape {existing.model}; "
                                 f"use a new name for a new model")
    if existing is not None and existing.engine != body.engine:
        raise HTTPException(409, f"deployment {name!r} is registered for engine {existing.engine!r}, not "
                                 f"{body.engine!r}; to change it: PUT /v1/deployments/{name}/engine (admin, audited)")
    return existing is not None


class EngineChange(BaseModel):
    engine: EngineName
    reason: str = Field(default="", max_length=500, description="why, kept in the audit event")


@router.put("/{name}/engine", status_code=200)
def put_engine(name: DeploymentName, body: EngineChange, session: SessionDep, now: NowDep, caller: AdminDep) -> dict:
    """Changes the engine a deployment runs (its planner rails follow from the next pass), recorded in the audit
    trail (GET /v1/audit: verb change_engine) with who, when, from, to and why."""
    with session.begin():
        deployment = get_or_404(session, name)
        deployments.lock(session, deployment)
        before = deployment.engine
        if before != body.engine:
            deployment.engine = body.engine
            audit.record(session, verb="change_engine", deployment=name, created_by=caller.name, now=now,
                         detail={"from": before, "to": body.engine, "reason": body.reason})
    return {"name": name, "engine": body.engine, "previous": before, "changed": before != body.engine}


@router.get("/{name}/overview", response_model=Overview)
def get_overview(name: DeploymentName, session: SessionDep, settings: SettingsDep, now: NowDep,
                 _: ViewerDep) -> Overview:
    return overview.build(session, get_or_404(session, name), settings, now)


@router.get("/{name}/pools/{role}/load", response_model=PoolLoad)
def get_pool_load(name: DeploymentName, role: PoolRole, session: SessionDep, settings: SettingsDep, now: NowDep,
                  _: ViewerDep) -> PoolLoad:
    deployment = get_or_404(session, name)
    pool = deployments.get_pool(session, deployment, role)
    if pool is None:
        raise HTTPException(404, f"deployment {name!r} has no {role!r} pool reporting")
    state = pools.read_state(session, deployment, pool, now=now, settings=settings, num_windows=4)
    # right after a placement change the newest window may hold no per-GPU load yet: show the last that does
    measured = [w for w in state.windows if w.num_slot_reports > 0]
    window = measured[-1] if measured else (state.windows[-1] if state.windows else None)
    previous = PLACEMENT.versions.get(session, pool, state.placement_version - 1) if state.placement_version else None
    empty = [[] for _ in range(state.num_layers)]
    return PoolLoad(role=role, ep_size=pool.ep_size, slots_per_rank=pool.slots_per_rank,
                    gpus_per_node=pool.gpus_per_node, window_index=window.index if window else None,
                    window_start=window.start if window else None,
                    window_placement_version=window.placement_version if window else None,
                    placement_version=state.placement_version,
                    expert_tokens=window.expert_tokens.tolist() if window else empty,
                    gpu_tokens=window.gpu_load(pool.ep_size).tolist() if window else empty,
                    slot_to_expert=state.slot_to_expert.tolist(),
                    previous_slot_to_expert=previous.value.slot_to_expert.tolist() if previous else None)
