"""A deployment and its pool written straight into the store (or registered over the API), the snapshots
its ranks post, and how much of them was stored: for tests of collect, store, actuate and the snapshot API."""

from __future__ import annotations

import numpy as np
from sqlalchemy import func, select

from agents.protocol import Array, Identity, ModelShape, Snapshot
from controlplane.desired import Policy
from controlplane.store import deployments
from controlplane.store.observed_tables import Agent, LoadWindow
from controlplane.store.tables import Deployment, Pool
from support.auth import operator

MODEL = ModelShape(name="tiny", num_layers=2, num_experts=8, num_groups=2, top_k=2)
EP_SIZE, SLOTS_PER_RANK = 2, 5


def identity(rank: int = 0, *, role: str = "decode", ep_size: int = EP_SIZE) -> Identity:
    return Identity(deployment="tiny", instance="i0", role=role, rank=rank, ep_size=ep_size,
                    slots_per_rank=SLOTS_PER_RANK)


def snapshot(*, window_start: float, rank: int = 0, placement_version: int = 0, seed: int = 1,
             **fields) -> Snapshot:
    """One rank's 10 s window with Poisson load: expert_tokens [2, 8], slot_tokens [2, 5]."""
    rng = np.random.default_rng(seed)
    return Snapshot(identity=identity(rank), model=MODEL, window_start=window_start, window_seconds=10,
                    placement_version=placement_version, expert_tokens=Array.from_numpy(rng.poisson(20, (2, 8))),
                    slot_tokens=Array.from_numpy(rng.poisson(30, (2, SLOTS_PER_RANK))), **fields)


def make_pool(session, *, now: float, policy: Policy | None = None, role: str = "decode",
              ep_size: int = EP_SIZE) -> tuple[Deployment, Pool]:
    """Deployment 'tiny' (created unless it exists) and its pool `role` (of `ep_size` ranks, which is its GPUs per
    replica to the pool planner) at placement and routing version 0."""
    deployment = deployments.get(session, "tiny") or deployments.create(
        session, name="tiny", model=MODEL, policy=policy or Policy(), created_by="test", now=now)
    made = deployments.create_pool(session, deployment=deployment, identity=identity(role=role, ep_size=ep_size),
                                   now=now)
    return deployment, made


def register(client) -> None:
    """Registers deployment 'tiny' over the API."""
    response = client.put("/v1/deployments/tiny", json={"model": MODEL.model_dump()}, headers=operator())
    assert response.status_code == 200, response.text


def stored(sessions) -> tuple[int, int]:
    """(load windows, agents) in the store."""
    with sessions() as session:
        return (session.scalar(select(func.count()).select_from(LoadWindow)),
                session.scalar(select(func.count()).select_from(Agent)))
