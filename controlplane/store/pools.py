"""Reads a pool's observed state for the planner, in one place."""

from __future__ import annotations

import math

from sqlalchemy import distinct, func, select
from sqlalchemy.orm import Session

from controlplane.config import Settings
from controlplane.observed import PoolState
from controlplane.store import actions, deployments, placements, pool_sizes, routing_limits, windows
from controlplane.store.tables import Agent, Deployment, Pool

HOUR = 3600.0


def read_state(session: Session, deployment: Deployment, pool: Pool, *, now: float, settings: Settings,
               num_windows: int | None = None) -> PoolState:
    model = deployments.model_of(deployment)
    agents = deployments.agent_counts(session, pool, now=now, stale_after_seconds=settings.stale_after_seconds,
                                      gone_after_seconds=settings.agent_gone_seconds)
    applied = placements.latest(session, pool)
    routing = routing_limits.latest(session, pool)
    last_hour = placements.recent(session, pool, since=now - HOUR)
    moved = 0
    previous = placements.get(session, pool, last_hour[0].version - 1) if last_hour else None
    for placement in last_hour:
        if previous is not None:
            moved += int((placement.slot_to_expert != previous.slot_to_expert).sum())
        previous = placement
    # a window is read once it ended half a window ago: late ranks have had time to post it
    current_index = math.floor((now - settings.window_seconds / 2) / settings.window_seconds)
    recent = windows.recent(session, pool, before_index=current_index,
                            limit=num_windows or settings.history_windows)
    return PoolState(
        deployment=deployment.name, role=pool.role, num_layers=model.num_layers, num_experts=model.num_experts,
        num_groups=model.num_groups, ep_size=pool.ep_size, slots_per_rank=pool.slots_per_rank,
        gpus_per_node=pool.gpus_per_node, num_agents=agents.total, num_fresh_agents=agents.fresh,
        num_gone_agents=agents.gone,
        placement_version=applied.version, slot_to_expert=applied.slot_to_expert, windows=tuple(recent),
        slot_share=applied.slot_share,
        last_change_at=applied.created_at if applied.version > 0 else None, moved_slots_last_hour=moved,
        topk_group=routing.topk_group, routing_changed_at=routing.created_at if routing.version > 0 else None,
        top_k=model.top_k,
        model_topk_group=model.topk_group,
        num_actions_last_hour=actions.count_since(session, pool, since=now - HOUR,
                                                  statuses=(actions.APPLIED, actions.VERIFIED, actions.ROLLED_BACK)))


def other_pools_gpus(session: Session, deployment: Deployment, pool: Pool, settings: Settings, now: float) -> int:
    """GPUs the deployment's other pools use: each one's size (moectl's latest, else its instances reporting
    fresh windows) times the GPUs of an instance (its EP size)."""
    since = now - settings.stale_after_windows * settings.window_seconds
    total = 0
    for other in deployments.pools_of(session, deployment):
        if other.id == pool.id:
            continue
        replicas = pool_sizes.latest(session, other).replicas
        if replicas is None:
            replicas = session.scalar(select(func.count(distinct(Agent.instance)))
                                      .where(Agent.pool_id == other.id, Agent.last_seen >= since)) or 0
        total += replicas * other.ep_size
    return total
