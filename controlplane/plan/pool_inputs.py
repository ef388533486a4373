"""What a pool's plan reads, read before it plans (controlplane/loop/reconcile.py's read phase): the pool's state
and, where the pool planner sizes the deployment's pools, its PD view."""

from __future__ import annotations

from dataclasses import dataclass

from controlplane.observed.pool import PoolState
from controlplane.plan.change_price import ChangeCost
from controlplane.solve.pools.view import PoolsView


@dataclass(frozen=True)
class ObservedPools:
    """Everything the pool planner reads of one deployment (loop/reconcile_pools.py `observe`)."""

    deployment: str
    view: PoolsView  # windows, sizes, targets, threshold (0 when unknown), GPU budget, past decisions
    is_threshold_known: bool  # False: none in force nor reported by the routers: no threshold decision


@dataclass(frozen=True)
class PoolInputs:
    """Everything a pool's plan reads."""

    state: PoolState  # the pool's windows, placement and knobs in force, parks, agents
    pools: ObservedPools | None  # the deployment's PD view, where the pool planner sizes its pools
    is_forced: bool = False  # a request is pending (a person, an alert): trigger thresholds are skipped
    is_asked: bool = False  # a person asked: a parked placement is lifted too
    engine: str = "bundled"  # the deployment's engine: which of its balancer's acts are watched
    change_cost: ChangeCost | None = None  # what a placement change costs the pool (None: the engine's prior)
