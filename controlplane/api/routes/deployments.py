"""Deployments: register, list, overview, policy, actions."""

from __future__ import annotations

from fastapi import APIRouter, HTTPException, Query

from agents.protocol import is_valid_name
from controlplane.api import overview
from controlplane.api.deps import NowDep, OperatorDep, SessionDep, SettingsDep
from controlplane.api.schemas import ActionOut, DeploymentIn, DeploymentSummary, Overview
from controlplane.desired import Policy
from controlplane.store import actions, deployments, policies
from controlplane.store.tables import Deployment

router = APIRouter(prefix="/v1/deployments", tags=["deployments"])


def _get(session, name: str) -> Deployment:
    deployment = deployments.get(session, name)
    if deployment is None:
        raise HTTPException(404, f"deployment {name!r} not found; GET /v1/deployments lists them")
    return deployment


@router.get("", response_model=list[DeploymentSummary])
def list_deployments(session: SessionDep, settings: SettingsDep, now: NowDep) -> list[DeploymentSummary]:
    out = []
    for deployment in deployments.list_all(session):
        view = overview.build(session, deployment, settings, now, num_actions=0)
        out.append(DeploymentSummary(name=view.deployment, model=view.model, mode=view.mode,
                                     imbalance=view.imbalance, agents=view.agents))
    return out


@router.put("/{name}", status_code=200)
def put_deployment(name: str, body: DeploymentIn, session: SessionDep, now: NowDep, who: OperatorDep) -> dict:
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
        deployments.create(session, name=name, model=body.model, policy=body.policy, created_by=who, now=now)
    return {"name": name, "created": True}


@router.get("/{name}/overview", response_model=Overview)
def get_overview(name: str, session: SessionDep, settings: SettingsDep, now: NowDep) -> Overview:
    return overview.build(session, _get(session, name), settings, now)


@router.get("/{name}/policy")
def get_policy(name: str, session: SessionDep) -> dict:
    version, policy = policies.active(session, _get(session, name))
    return {"version": version, "policy": policy.model_dump(mode="json")}


@router.put("/{name}/policy")
def put_policy(name: str, policy: Policy, session: SessionDep, now: NowDep, who: OperatorDep) -> dict:
    with session.begin():
        version = policies.put(session, deployment=_get(session, name), policy=policy, created_by=who, now=now)
    return {"version": version, "policy": policy.model_dump(mode="json")}


@router.get("/{name}/actions", response_model=list[ActionOut])
def list_actions(name: str, session: SessionDep, limit: int = Query(50, ge=1, le=1000)) -> list[ActionOut]:
    deployment = _get(session, name)
    role_of = {p.id: p.role for p in deployments.pools_of(session, deployment)}
    return [overview.action_out(a, role_of) for a in actions.recent(session, deployment, limit=limit)]
