"""Deployments: register, list, overview."""

from __future__ import annotations

from fastapi import APIRouter, HTTPException
from sqlalchemy.orm import Session

from agents.protocol import is_valid_name
from controlplane.api import overview
from controlplane.api.deps import AdminDep, NowDep, SessionDep, SettingsDep, ViewerDep
from controlplane.api.schemas import DeploymentIn, DeploymentSummary, Overview
from controlplane.store import deployments
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
def put_deployment(name: str, body: DeploymentIn, session: SessionDep, now: NowDep, caller: AdminDep) -> dict:
    """Registers a deployment (idempotent for the same model shape). The shape cannot change in place:
    placements and windows are sized by it."""
    if not is_valid_name(name):
        raise HTTPException(422, f"deployment name {name!r} must be a DNS label: lowercase letters, digits "
                                 f"and '-', at most 63 characters")
    with session.begin():
        existing = deployments.get(session, name)
        if existing is not None:
            if deployments.model_of(existing) != body.model:
                raise HTTPException(409, f"deployment {name!r} exists with another model shape "
                                         f"{existing.model}; use a new name for a new model")
            return {"name": name, "created": False}
        deployments.create(session, name=name, model=body.model, policy=body.policy, created_by=caller.name, now=now)
    return {"name": name, "created": True}


@router.get("/{name}/overview", response_model=Overview)
def get_overview(name: str, session: SessionDep, settings: SettingsDep, now: NowDep, _: ViewerDep) -> Overview:
    return overview.build(session, get_or_404(session, name), settings, now)
