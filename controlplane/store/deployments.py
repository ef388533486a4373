"""Deployments, their pools (one per role) and the agents that report for them."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from sqlalchemy import func, insert, select, update
from sqlalchemy.orm import Session

from agents.protocol import Identity, ModelShape, default_slot_to_expert
from controlplane.desired import Policy
from controlplane.store import placements, policies, pool_sizes, routing_limits
from controlplane.store.tables import Agent, Deployment, Pool
from controlplane.store.timestamps import utc


def get(session: Session, name: str) -> Deployment | None:
    return session.scalar(select(Deployment).where(Deployment.name == name))


def list_all(session: Session) -> list[Deployment]:
    return list(session.scalars(select(Deployment).order_by(Deployment.name)))


def create(session: Session, *, name: str, model: ModelShape, policy: Policy, created_by: str,
           now: float) -> Deployment:
    deployment = Deployment(name=name, model=model.model_dump(), created_at=utc(now))
    session.add(deployment)
    session.flush()
    policies.put(session, deployment=deployment, policy=policy, created_by=created_by, now=now)
    return deployment


def lock(session: Session, deployment: Deployment) -> None:
    """Serialises writers of the deployment's policy until this transaction ends (see `lock_pool`)."""
    _lock_row(session, Deployment, deployment.id)


def lock_pool(session: Session, pool: Pool) -> None:
    """Serialises the pool's writers (reconciles, people's decisions) until this transaction ends, on both
    databases: a row lock on PostgreSQL (NO KEY UPDATE, so snapshots inserting rows that reference the pool
    are not blocked), SQLite's write lock. Take it before reading what the write depends on: on SQLite the
    driver only begins the transaction at its first write, so earlier reads may already be stale."""
    _lock_row(session, Pool, pool.id)


def _lock_row(session: Session, table: type[Deployment] | type[Pool], row_id: int) -> None:
    # an UPDATE that changes nothing: it takes the lock where SELECT ... FOR UPDATE is a no-op (SQLite)
    session.execute(update(table).where(table.id == row_id).values(created_at=table.created_at))


def model_of(deployment: Deployment) -> ModelShape:
    return ModelShape.model_validate(deployment.model)


def pools_of(session: Session, deployment: Deployment) -> list[Pool]:
    return list(session.scalars(select(Pool).where(Pool.deployment_id == deployment.id).order_by(Pool.role)))


def get_pool(session: Session, deployment: Deployment, role: str) -> Pool | None:
    return session.scalar(select(Pool).where(Pool.deployment_id == deployment.id, Pool.role == role))


def create_pool(session: Session, *, deployment: Deployment, identity: Identity, now: float) -> Pool:
    """A pool appears with its first agent, holding version 0 of each knob: the agents' default placement and
    routing, and no size set by moectl."""
    pool = Pool(deployment_id=deployment.id, role=identity.role.value, ep_size=identity.ep_size,
                slots_per_rank=identity.slots_per_rank, gpus_per_node=identity.gpus_per_node,
                created_at=utc(now))
    session.add(pool)
    session.flush()
    model = model_of(deployment)
    table = default_slot_to_expert(model.num_layers, model.num_experts, identity.ep_size * identity.slots_per_rank)
    placements.add(session, pool=pool, version=0, slot_to_expert=table, slot_share=None, action_id=None, now=now)
    routing_limits.add(session, pool=pool, version=0, topk_group=None, action_id=None, now=now)
    pool_sizes.add(session, pool=pool, version=0, replicas=None, action_id=None, now=now)
    return pool


@dataclass(frozen=True)
class AgentSeen:
    """A rank that reported a window: of one instance of the pool."""

    rank: int
    placement_version: int
    node: str = ""
    gpu_uuid: str = ""


def record_agents(session: Session, *, pool: Pool, instance: str, seen: list[AgentSeen], window_index: int,
                  now: float) -> list[int]:
    """Notes that ranks of one instance reported a window (one rank's snapshot, or its whole EP group's).
    Returns for each, in order, how many windows it has reported, this one included, or 0 when it already
    reported this window (a retry: not counted twice).

    One read, and writes in bulk: a group's ranks on the same node and GPU as before (the usual case) are one
    UPDATE per placement version, whatever the group's size; new ranks one INSERT."""
    query = select(Agent.id, Agent.rank, Agent.last_window_index, Agent.num_windows, Agent.node,
                   Agent.gpu_uuid).where(Agent.pool_id == pool.id, Agent.instance == instance)
    if len(seen) == 1:
        query = query.where(Agent.rank == seen[0].rank)
    by_rank = {row.rank: row for row in session.execute(query.with_for_update())}
    counts, moved, inserts = [], [], []
    same_place: dict[tuple[bool, int], list[int]] = {}  # (new window, placement version) -> agent ids
    for rank in seen:
        known = by_rank.get(rank.rank)
        is_new_window = known is None or window_index > known.last_window_index
        num_windows = (0 if known is None else known.num_windows) + int(is_new_window)
        counts.append(num_windows if is_new_window else 0)
        if known is None:
            inserts.append({"pool_id": pool.id, "instance": instance, "rank": rank.rank, "first_seen": now,
                            "last_seen": now, "node": rank.node, "gpu_uuid": rank.gpu_uuid,
                            "placement_version": rank.placement_version, "num_windows": num_windows,
                            "last_window_index": window_index})
        elif (known.node, known.gpu_uuid) == (rank.node, rank.gpu_uuid):
            same_place.setdefault((is_new_window, rank.placement_version), []).append(known.id)
        else:
            moved.append({"id": known.id, "node": rank.node, "gpu_uuid": rank.gpu_uuid})
            same_place.setdefault((is_new_window, rank.placement_version), []).append(known.id)
    for (is_new_window, version), ids in same_place.items():
        values = {"last_seen": now, "placement_version": version}
        if is_new_window:
            values |= {"last_window_index": window_index, "num_windows": Agent.num_windows + 1}
        session.execute(update(Agent).where(Agent.id.in_(ids)).values(**values)
                        .execution_options(synchronize_session=False))
    if moved:
        session.execute(update(Agent), moved)  # by primary key, as one executemany
    if inserts:
        session.execute(insert(Agent), inserts)
    return counts


def agent_counts(session: Session, pool: Pool, *, now: float, stale_after_seconds: float) -> tuple[int, int]:
    """(number of agents, number seen within stale_after_seconds)."""
    total = session.scalar(select(func.count()).where(Agent.pool_id == pool.id)) or 0
    fresh = session.scalar(select(func.count()).where(Agent.pool_id == pool.id,
                                                      Agent.last_seen >= now - stale_after_seconds)) or 0
    return total, fresh


def gpu_agents(session: Session, pool: Pool) -> list[Agent]:
    return list(session.scalars(select(Agent).where(Agent.pool_id == pool.id)
                                .order_by(Agent.instance, Agent.rank)))


def zeros_for(deployment: Deployment, pool: Pool) -> tuple[np.ndarray, np.ndarray]:
    """Empty window arrays: expert_tokens [num_layers, num_experts], slot_tokens [num_layers, num_slots]."""
    model = model_of(deployment)
    return (np.zeros((model.num_layers, model.num_experts), np.int64),
            np.zeros((model.num_layers, pool.ep_size * pool.slots_per_rank), np.int64))
