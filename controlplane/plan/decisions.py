"""A pool's whole plan for one pass, pure: what was read of the pool in, every knob's decision out.

The pass (controlplane/loop/reconcile.py) settles and reads everything first, calls `decide` once (through its
compute: in a worker process for large pools), then writes the decisions knob by knob. `decide` loops over the
registry of the knobs' planners (plan/knob_plans.py); nothing here names a knob but the two the pass reports
(the placement's plan and the pool plan). Nothing here reads the database.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from controlplane.config import Settings
from controlplane.desired import KnobKind, Plan, Policy
from controlplane.observed.pool import PoolState
from controlplane.plan.balancer_watch import BalancerWatch, watch_balancer
from controlplane.plan.diagnose import MtpDiagnosis, diagnose_mtp, diagnose_prefix_hits
from controlplane.plan.knob_plan import Given, Move
from controlplane.plan.knob_plans import KNOB_PLANS
from controlplane.plan.pool_inputs import PoolInputs
from controlplane.plan.pool_plan import PoolPlan
from controlplane.plan.routing_reach import RoutingReach, check_routing_limit


@dataclass(frozen=True)
class Decisions:
    """Every knob's decision for the pool, each with its reason, and the findings for people that no knob fixes."""

    steps: dict[KnobKind, Any]  # knob kind -> its planner's decision (None: not planned this pass), registry order
    reach: RoutingReach  # whether the group limit in force is honoured
    prefix_hits: tuple[str, list[float]] | None  # the finding and the ratios it read, when hits stay under the floor
    mtp: MtpDiagnosis | None = None  # why MTP acceptance is under its floor, if it is
    balancer: BalancerWatch | None = None  # whether the engine's own balancer still acts

    @property
    def placement(self) -> Plan:
        """The placement's plan: what the pass reports and the placement's requests are answered with."""
        return self.steps[KnobKind.placement]

    @property
    def pool_plan(self) -> PoolPlan | None:
        """The deployment's pool plan, where the pool planner sizes it: what the pass records for people."""
        return self.steps[KnobKind.pool_size]

    def unparked(self) -> dict[str, str]:
        """knob kind -> why its park is lifted this pass (its inputs changed materially, or a person asked)."""
        why = {kind: getattr(step, "unparked", None) for kind, step in self.steps.items()}
        return {kind: reason for kind, reason in why.items() if reason}

    def moves(self, policy: Policy, state: PoolState, role: str) -> list[Move]:
        """What the decisions ask to change on the pool `role`, knob by knob in the registry's order."""
        return [move for plan in KNOB_PLANS for move in plan.moves(self.steps[plan.kind], policy, state, role)]


def decide(policy: Policy, inputs: PoolInputs, settings: Settings, now: float) -> Decisions:
    mtp = diagnose_mtp(policy, inputs.state, now)
    steps: dict[KnobKind, Any] = {}
    for plan in KNOB_PLANS:
        steps[plan.kind] = plan.decide(Given(policy, inputs, settings, now, mtp, earlier=dict(steps)))
    return Decisions(steps, reach=check_routing_limit(policy, inputs.state),
                     prefix_hits=diagnose_prefix_hits(policy, inputs.state), mtp=mtp,
                     balancer=watch_balancer(inputs.state, inputs.engine))
