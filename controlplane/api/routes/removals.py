"""Admin removals: agents that will not come back (replaced pods, renamed instances) and whole deployments,
each recorded in the audit log (`GET /v1/audit`), which outlives what it removed.

Only what has stopped reporting is removed: an agent still fresh would reappear with its next snapshot
(and a deployment with its agents' next registration), so removing it is a 409 that says to stop it first.
Agents silent past `agent_gone_seconds` already left the quorum on their own; removal makes that final now.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, HTTPException, Path, Query
from pydantic import BaseModel, Field

from agents.protocol import NAME_PATTERN, Role
from controlplane.api.deps import AdminDep, DeploymentName, NowDep, SessionDep, SettingsDep, ViewerDep
from controlplane.api.routes.deployments import get_or_404
from controlplane.config import Settings
from controlplane.store import audit, deployments
from controlplane.store.observed_tables import Agent
from controlplane.store.tables import Deployment, Pool
from controlplane.store.timestamps import seconds

router = APIRouter(tags=["removals"])
Instance = Annotated[str, Path(min_length=1, max_length=128, pattern=r"^[^\x00-\x1f\x7f]+$",
                               description="the agent's instance (its EP group): printable, as on the wire")]
Rank = Annotated[int, Path(ge=0, le=4095, description="the EP rank within the instance")]


class AgentOut(BaseModel):
    role: str
    instance: str
    rank: int
    node: str
    gpu_uuid: str
    state: str = Field(description="fresh, stale (counted against the quorum) or gone (left it)")
    last_seen: float
    silent_seconds: float
    placement_version: int = Field(description="the placement version its last snapshot ran")


class AuditOut(BaseModel):
    id: int
    verb: str
    deployment: str
    detail: dict
    created_by: str
    created_at: float


def _agent_out(agent: Agent, role: str, settings: Settings, now: float) -> AgentOut:
    state = deployments.agent_state(agent, now=now, stale_after_seconds=settings.stale_after_seconds,
                                    gone_after_seconds=settings.agent_gone_seconds)
    return AgentOut(role=role, instance=agent.instance, rank=agent.rank, node=agent.node, gpu_uuid=agent.gpu_uuid,
                    state=state, last_seen=agent.last_seen, silent_seconds=round(now - agent.last_seen, 3),
                    placement_version=agent.placement_version)


def _pool_or_404(session, deployment: Deployment, role: Role) -> Pool:
    pool = deployments.get_pool(session, deployment, role.value)
    if pool is None:
        raise HTTPException(404, f"deployment {deployment.name!r} has no {role.value!r} pool")
    return pool


def _refuse_fresh(agents: list[AgentOut], what: str, settings: Settings) -> None:
    running = [a for a in agents if a.state == "fresh"]
    if running:
        names = ", ".join(f"{a.role}/{a.instance}/{a.rank} ({a.silent_seconds:.0f}s ago)" for a in running[:5])
        more = f" and {len(running) - 5} more" if len(running) > 5 else ""
        raise HTTPException(409, f"{what}: {len(running)} agent(s) still report: {names}{more}; they would "
                                 f"reappear with their next snapshot. Stop them first: an agent is stale after "
                                 f"{settings.stale_after_seconds:g}s of silence and can be removed then")


@router.get("/v1/deployments/{name}/pools/{role}/agents", response_model=list[AgentOut])
def list_agents(name: DeploymentName, role: Role, session: SessionDep, settings: SettingsDep, now: NowDep,
                _: ViewerDep) -> list[AgentOut]:
    pool = _pool_or_404(session, get_or_404(session, name), role)
    return [_agent_out(a, role.value, settings, now) for a in deployments.find_agents(session, pool)]


@router.delete("/v1/deployments/{name}/pools/{role}/agents", response_model=list[AgentOut])
def remove_silent_agents(name: DeploymentName, role: Role, session: SessionDep, settings: SettingsDep, now: NowDep,
                         caller: AdminDep) -> list[AgentOut]:
    """Removes every agent of the pool that stopped reporting (stale or gone); fresh ones stay. Answers
    with those removed (none: an empty list)."""
    with session.begin():
        pool = _pool_or_404(session, get_or_404(session, name), role)
        found = deployments.find_agents(session, pool)
        removed = [(a, out) for a in found if (out := _agent_out(a, role.value, settings, now)).state != "fresh"]
        return _remove(session, name, [a for a, _ in removed], [o for _, o in removed], caller.name, now)


@router.delete("/v1/deployments/{name}/pools/{role}/agents/{instance}", response_model=list[AgentOut])
def remove_instance(name: DeploymentName, role: Role, instance: Instance, session: SessionDep, settings: SettingsDep,
                    now: NowDep, caller: AdminDep) -> list[AgentOut]:
    """Removes every rank of an instance; 409 while any of them still reports."""
    return _remove_matching(name, role, instance, None, session, settings, now, caller.name)


@router.delete("/v1/deployments/{name}/pools/{role}/agents/{instance}/{rank}", response_model=list[AgentOut])
def remove_rank(name: DeploymentName, role: Role, instance: Instance, rank: Rank, session: SessionDep,
                settings: SettingsDep, now: NowDep, caller: AdminDep) -> list[AgentOut]:
    """Removes one rank of an instance; 409 while it still reports."""
    return _remove_matching(name, role, instance, rank, session, settings, now, caller.name)


def _remove_matching(name: str, role: Role, instance: str, rank: int | None, session, settings: Settings, now: float,
                     created_by: str) -> list[AgentOut]:
    with session.begin():
        pool = _pool_or_404(session, get_or_404(session, name), role)
        found = deployments.find_agents(session, pool, instance=instance, rank=rank)
        what = f"{name}/{role.value}/{instance}" + (f"/{rank}" if rank is not None else "")
        if not found:
            raise HTTPException(404, f"no agent {what}; GET /v1/deployments/{name}/pools/{role.value}/agents "
                                     f"lists them")
        outs = [_agent_out(a, role.value, settings, now) for a in found]
        _refuse_fresh(outs, f"cannot remove {what}", settings)
        return _remove(session, name, found, outs, created_by, now)


def _remove(session, name: str, agents: list[Agent], outs: list[AgentOut], created_by: str,
            now: float) -> list[AgentOut]:
    if agents:
        deployments.remove_agents(session, agents)
        audit.record(session, verb="delete_agents", deployment=name, created_by=created_by, now=now,
                     detail={"agents": [o.model_dump(include={"role", "instance", "rank", "state", "last_seen"})
                                        for o in outs]})
    return outs


@router.delete("/v1/deployments/{name}")
def remove_deployment(name: DeploymentName, session: SessionDep, settings: SettingsDep, now: NowDep,
                      caller: AdminDep) -> dict:
    """Deletes the deployment with its pools, agents, windows, versions, policies and actions; 409 while any
    of its agents still reports. Alert events stay (they name the deployment, they do not belong to it)."""
    with session.begin():
        deployment = get_or_404(session, name)
        outs = [_agent_out(a, pool.role, settings, now) for pool in deployments.pools_of(session, deployment)
                for a in deployments.find_agents(session, pool)]
        _refuse_fresh(outs, f"cannot delete deployment {name!r}", settings)
        model = deployment.model
        removed = deployments.remove(session, deployment)
        audit.record(session, verb="delete_deployment", deployment=name, created_by=caller.name, now=now,
                     detail={"model": model, "removed": removed})
    return {"name": name, "removed": removed}


@router.get("/v1/audit", response_model=list[AuditOut])
def list_audit(session: SessionDep, _: ViewerDep,
               deployment: str | None = Query(None, pattern=NAME_PATTERN, max_length=63),
               limit: int = Query(50, ge=1, le=1000)) -> list[AuditOut]:
    """Admin removals, newest first."""
    events = audit.recent(session, deployment=deployment, limit=limit)
    return [AuditOut(id=e.id, verb=e.verb, deployment=e.deployment, detail=e.detail, created_by=e.created_by,
                     created_at=seconds(e.created_at)) for e in events]
