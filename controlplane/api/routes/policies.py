"""Policies: read, change (guarded by If-Match), list past versions, revert. Every change is kept."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Header, HTTPException, Response

from controlplane.api.deps import AdminDep, DeploymentName, NowDep, RowId, SessionDep, ViewerDep
from controlplane.api.routes.deployments import get_or_404
from controlplane.api.schemas import PolicyOut, RevertIn
from controlplane.desired import Policy
from controlplane.store import deployments, policies

router = APIRouter(prefix="/v1/deployments/{name}/policy", tags=["policies"])


def _etag(version: int) -> str:
    return f'"{version}"'


def _check_if_match(if_match: str | None, version: int) -> None:
    """Optimistic concurrency: a write based on an older read is refused, not merged."""
    if if_match is not None and if_match.strip() not in (_etag(version), str(version), "*"):
        raise HTTPException(412, f"the policy changed since you read it: If-Match {if_match} but the current "
                                 f"version is {version}; read it again and reapply your change")


@router.get("", response_model=PolicyOut)
def get_policy(name: DeploymentName, session: SessionDep, response: Response, _: ViewerDep) -> PolicyOut:
    row = policies.latest_row(session, get_or_404(session, name))
    response.headers["ETag"] = _etag(row.version)
    return policies.out(row)


@router.put("", response_model=PolicyOut)
def put_policy(name: DeploymentName, policy: Policy, session: SessionDep, now: NowDep, caller: AdminDep,
               response: Response, if_match: Annotated[str | None, Header()] = None) -> PolicyOut:
    with session.begin():
        deployment = get_or_404(session, name)
        deployments.lock(session, deployment)  # writers of the policy in turn: each If-Match is checked in order
        _check_if_match(if_match, policies.latest_row(session, deployment).version)
        policies.put(session, deployment=deployment, policy=policy, created_by=caller.name, now=now)
        row = policies.latest_row(session, deployment)
    response.headers["ETag"] = _etag(row.version)
    return policies.out(row)


@router.get("/versions", response_model=list[PolicyOut])
def list_versions(name: DeploymentName, session: SessionDep, _: ViewerDep) -> list[PolicyOut]:
    return [policies.out(row) for row in policies.history(session, get_or_404(session, name))]


@router.get("/versions/{version}", response_model=PolicyOut)
def get_version(name: DeploymentName, version: RowId, session: SessionDep, _: ViewerDep) -> PolicyOut:
    row = policies.version_row(session, get_or_404(session, name), version)
    if row is None:
        raise HTTPException(404, f"policy version {version} of {name!r} not found")
    return policies.out(row)


@router.post("/revert", response_model=PolicyOut)
def revert(name: DeploymentName, body: RevertIn, session: SessionDep, now: NowDep, caller: AdminDep, response: Response,
           if_match: Annotated[str | None, Header()] = None) -> PolicyOut:
    """Makes a past version current again, as a new version (history is never rewritten)."""
    with session.begin():
        deployment = get_or_404(session, name)
        deployments.lock(session, deployment)  # writers of the policy in turn: each If-Match is checked in order
        _check_if_match(if_match, policies.latest_row(session, deployment).version)
        old = policies.version_row(session, deployment, body.version)
        if old is None:
            raise HTTPException(404, f"policy version {body.version} of {name!r} not found")
        policies.put(session, deployment=deployment, policy=Policy.model_validate(old.spec),
                     created_by=caller.name, now=now, note=f"revert to v{body.version}")
        row = policies.latest_row(session, deployment)
    response.headers["ETag"] = _etag(row.version)
    return policies.out(row)
