"""Deployments, their pools (one per role) and the agents that report for them."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from sqlalchemy import delete, func, insert, select, update
from sqlalchemy.orm import Session

from agents.protocol import Identity, ModelShape, default_slot_to_expert
from agents.protocol.placement import PlacementTable
from controlplane.desired import Policy
from controlplane.store import policies
from controlplane.store.batches import delete_some
from controlplane.store.knobs import KNOBS, PLACEMENT
from controlplane.store.observed_tables import Agent, LoadWindow
from controlplane.store.tables import Action, Deployment, Placement, Pool
from controlplane.store.timestamps import utc


def get(session: Session, name: str) -> Deployment | None:
    return session.scalar(select(Deployment).where(Deployment.name == name))


def list_all(session: Session) -> list[Deployment]:
    return list(session.scalars(select(Deployment).order_by(Deployment.name)))


def create(session: Session, *, name: str, model: ModelShape, policy: Policy, created_by: str,
           now: float, engine: str = "bundled") -> Deployment:
    deployment = Deployment(name=name, model=model.model_dump(), created_at=utc(now), engine=engine)
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


def is_lock_exclusive(session: Session) -> bool:
    """Whether `lock_pool` holds the whole database's write lock (SQLite): every writer waits while it is held,
    agents' posts too, so the loop plans before it takes it (controlplane/loop/plan_ahead.py)."""
    return session.get_bind().dialect.name == "sqlite"


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
    PLACEMENT.versions.add(session, pool=pool, version=0, value=PlacementTable(table), action_id=None, now=now)
    for knob in KNOBS.values():
        if knob is not PLACEMENT:
            knob.versions.add(session, pool=pool, version=0, value=None, action_id=None, now=now)
    return pool


@dataclass(frozen=True)
class AgentSeen:
    """A rank that reported a window: of one instance of the pool."""

    rank: int
    placement_version: int
    node: str = ""
    gpu_uuid: str = ""


def record_agents(session: Session, *, pool: Pool, instance: str, seen: list[AgentSeen], window_index: int,
                  now: float, adapter_faults: dict[str, int] | None | bool = False) -> list[int]:
    """Notes that ranks of one instance reported a window (one rank's snapshot, or its whole EP group's).
    Returns for each, in order, how many windows it has reported, this one included, or 0 when it already
    reported this window (a retry: not counted twice).

    The usual case, known ranks reporting a new window, is one UPDATE ... RETURNING per placement version the
    ranks ran (one, but while a placement rolls out), whatever the group's size; what it did not count (new
    ranks, a retried or late window) is read and written after it. adapter_faults: what a group's engine adapter
    reported failing in this window (None: nothing), kept on its ranks; False: not a group's post, left as is."""
    faults = {} if adapter_faults is False else {"adapter_faults": adapter_faults or None}
    in_instance = (Agent.pool_id == pool.id, Agent.instance == instance)
    by_version: dict[int, list[int]] = {}
    for rank in seen:
        by_version.setdefault(rank.placement_version, []).append(rank.rank)
    counted = {}  # rank -> (id, num_windows, node, gpu_uuid) of the ranks the UPDATE counted
    table, c = Agent.__table__, Agent.__table__.c  # a Core statement: the ORM's bulk-update path costs more Python
    for version, ranks in by_version.items():
        counted |= {row.rank: row for row in session.execute(
            update(table).where(c.pool_id == pool.id, c.instance == instance, c.rank.in_(ranks),
                                c.last_window_index < window_index)
            .values(last_seen=now, placement_version=version, last_window_index=window_index,
                    num_windows=c.num_windows + 1, **faults)
            .returning(c.id, c.rank, c.num_windows, c.node, c.gpu_uuid))}
    rest = [r for r in seen if r.rank not in counted]
    known = {} if not rest else {row.rank: row.id for row in session.execute(
        select(Agent.rank, Agent.id).where(*in_instance, Agent.rank.in_([r.rank for r in rest])))}
    # by primary key, each an executemany: ranks seen again in a retried or late window, ranks that moved
    seen_again = [{"id": known[r.rank], "last_seen": now, "placement_version": r.placement_version, "node": r.node,
                   "gpu_uuid": r.gpu_uuid, **faults} for r in rest if r.rank in known]
    moved = [{"id": row.id, "node": r.node, "gpu_uuid": r.gpu_uuid} for r in seen
             if (row := counted.get(r.rank)) is not None and (row.node, row.gpu_uuid) != (r.node, r.gpu_uuid)]
    for values in (seen_again, moved):
        if values:
            session.execute(update(Agent), values)
    inserts = [{"pool_id": pool.id, "instance": instance, "rank": r.rank, "first_seen": now, "last_seen": now,
                "node": r.node, "gpu_uuid": r.gpu_uuid, "placement_version": r.placement_version, "num_windows": 1,
                "last_window_index": window_index, **faults} for r in rest if r.rank not in known]
    if inserts:
        session.execute(insert(Agent), inserts)
    return [counted[r.rank].num_windows if r.rank in counted else 0 if r.rank in known else 1 for r in seen]


@dataclass(frozen=True)
class AgentCounts:
    """A pool's agents by how long they have been silent.

    `fresh`: within the stale limit. `stale`: up to the gone limit; still in the quorum, counted against it.
    `gone`: past it; out of the quorum and the totals (a replaced pod never comes back under its old name)."""

    fresh: int
    stale: int
    gone: int

    @property
    def total(self) -> int:
        """The agents the quorum counts: fresh and stale."""
        return self.fresh + self.stale


def agent_state(agent: Agent, *, now: float, stale_after_seconds: float, gone_after_seconds: float) -> str:
    """fresh, stale or gone (AgentCounts)."""
    silent = now - agent.last_seen
    return "fresh" if silent <= stale_after_seconds else "stale" if silent <= gone_after_seconds else "gone"


def agent_counts(session: Session, pool: Pool, *, now: float, stale_after_seconds: float,
                 gone_after_seconds: float) -> AgentCounts:
    def count(*where) -> int:
        return session.scalar(select(func.count()).where(Agent.pool_id == pool.id, *where)) or 0

    fresh = count(Agent.last_seen >= now - stale_after_seconds)
    gone = count(Agent.last_seen < now - gone_after_seconds)
    return AgentCounts(fresh=fresh, stale=count() - fresh - gone, gone=gone)


def zeros_for(deployment: Deployment, pool: Pool) -> tuple[np.ndarray, np.ndarray]:
    """Empty window arrays: expert_tokens [num_layers, num_experts], slot_tokens [num_layers, num_slots]."""
    model = model_of(deployment)
    return (np.zeros((model.num_layers, model.num_experts), np.int64),
            np.zeros((model.num_layers, pool.ep_size * pool.slots_per_rank), np.int64))


def find_agents(session: Session, pool: Pool, *, instance: str | None = None, rank: int | None = None) -> list[Agent]:
    """The pool's agents, or those of one instance, or one rank of it."""
    query = select(Agent).where(Agent.pool_id == pool.id).order_by(Agent.instance, Agent.rank)
    if instance is not None:
        query = query.where(Agent.instance == instance)
    if rank is not None:
        query = query.where(Agent.rank == rank)
    return list(session.scalars(query))


def remove_agents(session: Session, agents: list[Agent]) -> None:
    """Forgets agents: they leave the counts now; one that reports again is a new agent (warm-up included)."""
    if agents:
        session.execute(delete(Agent).where(Agent.id.in_([a.id for a in agents])))


def remove(session: Session, deployment: Deployment) -> dict[str, int]:
    """Deletes a deployment and everything of it (pools, agents, windows, versions, policies, actions,
    requests: the foreign keys cascade). Returns how many rows of each went."""
    pool_ids = select(Pool.id).where(Pool.deployment_id == deployment.id).scalar_subquery()
    removed = {table.__tablename__: session.scalar(select(func.count()).where(column.in_(pool_ids))) or 0
               for table, column in ((Agent, Agent.pool_id), (LoadWindow, LoadWindow.pool_id),
                                     (Placement, Placement.pool_id))}
    removed["pools"] = session.scalar(select(func.count()).where(Pool.deployment_id == deployment.id)) or 0
    removed["actions"] = session.scalar(select(func.count()).where(Action.deployment_id == deployment.id)) or 0
    session.execute(delete(Deployment).where(Deployment.id == deployment.id))
    return removed


def prune_agents(session: Session, *, silent_since: float, limit: int) -> int:
    """Deletes agents that have not reported since `silent_since` (gone long ago)."""
    return delete_some(session, Agent, Agent.last_seen < silent_since, limit=limit)
