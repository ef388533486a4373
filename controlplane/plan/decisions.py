"""A pool's whole plan for one pass, pure: what was read of the pool in, every knob's decision out.

The pass (controlplane/loop/reconcile.py) settles and reads everything first, calls `decide` once (through its
compute: in a worker process for large pools), then writes the decisions knob by knob. Nothing here reads the
database.
"""

from __future__ import annotations

from dataclasses import dataclass

from controlplane.config import Settings
from controlplane.desired import Decision, KnobKind, Plan, Policy
from controlplane.observed.pool import PoolState
from controlplane.plan.balancer_watch import BalancerWatch, watch_balancer
from controlplane.plan.capacity_factor import CapacityStep, plan_capacity_factor
from controlplane.plan.change_cost import change_cost
from controlplane.plan.change_price import ChangeCost
from controlplane.plan.diagnose import MtpDiagnosis, diagnose_mtp, diagnose_prefix_hits
from controlplane.plan.placement import plan_pool
from controlplane.plan.placement_price import priced
from controlplane.plan.pools_outcome import ObservedPools, PoolsOutcome, plan_deployment
from controlplane.plan.routing_limit import plan_routing
from controlplane.plan.routing_reach import RoutingReach, check_routing_limit
from controlplane.solve.routing import RoutingStep


@dataclass(frozen=True)
class PoolInputs:
    """Everything a pool's plan reads, read before it plans."""

    state: PoolState  # the pool's windows, placement and knobs in force, parks, agents
    pools: ObservedPools | None  # the deployment's PD view, where the pool planner sizes its pools
    is_forced: bool = False  # a request is pending (a person, an alert): trigger thresholds are skipped
    is_asked: bool = False  # a person asked: a parked placement is lifted too
    engine: str = "bundled"  # the deployment's engine: which of its balancer's acts are watched
    change_cost: ChangeCost | None = None  # what a placement change costs the pool (None: the engine's prior)


@dataclass(frozen=True)
class Decisions:
    """Every knob's decision for the pool, each with its reason, and the findings for people that no knob fixes."""

    placement: Plan
    routing: RoutingStep | None  # None: the placement moves this pass (one change per pass)
    pools: PoolsOutcome | None  # both pools' sizes and the prefill threshold; None where not planned
    reach: RoutingReach  # whether the group limit in force is honoured
    prefix_hits: tuple[str, list[float]] | None  # the finding and the ratios it read, when hits stay under the floor
    capacity: CapacityStep | None = None  # the per-expert cap; None: the placement moves this pass
    mtp: MtpDiagnosis | None = None  # why MTP acceptance is under its floor, if it is
    balancer: BalancerWatch | None = None  # whether the engine's own balancer still acts

    def unparked(self) -> dict[str, str]:
        """knob kind -> why its park is lifted this pass (its inputs changed materially, or a person asked)."""
        steps = {KnobKind.placement: self.placement, KnobKind.routing: self.routing,
                 KnobKind.expert_capacity: self.capacity}
        return {kind: step.unparked for kind, step in steps.items() if step is not None and step.unparked}


def decide(policy: Policy, inputs: PoolInputs, settings: Settings, now: float) -> Decisions:
    mtp = diagnose_mtp(policy, inputs.state, now)
    placement = plan_pool(policy, inputs.state, now, is_forced=inputs.is_forced, is_asked=inputs.is_asked, mtp=mtp)
    cost = inputs.change_cost or change_cost(inputs.engine, None)
    placement = priced(placement, inputs.state, cost, policy.change_price_margin, is_asked=inputs.is_asked)
    routing = None if placement.decision == Decision.rebalance else plan_routing(policy, inputs.state, now, mtp)
    pools = None if inputs.pools is None else plan_deployment(inputs.pools, policy, settings)
    moves = placement.decision == Decision.rebalance  # one change of the pool's imbalance per pass
    capacity = None if moves else plan_capacity_factor(policy, inputs.state, now)
    return Decisions(placement, routing, pools, reach=check_routing_limit(policy, inputs.state),
                     prefix_hits=diagnose_prefix_hits(policy, inputs.state), capacity=capacity, mtp=mtp,
                     balancer=watch_balancer(inputs.state, inputs.engine))
