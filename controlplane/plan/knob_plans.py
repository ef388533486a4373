"""The registry of the knobs' planners, in the order a pass decides them: the placement first (the routing limit
and the capacity factor wait while it moves), then the one-number knobs, then the pool plan. A new knob is one
module under plan/ ending with its `KnobPlan` (plan/knob_plan.py) and one entry here."""

from __future__ import annotations

from controlplane.desired import KnobKind
from controlplane.plan.capacity_factor import CAPACITY_PLAN
from controlplane.plan.knob_plan import KnobPlan
from controlplane.plan.placement import PLACEMENT_PLAN
from controlplane.plan.pool_plan import POOLS_PLAN
from controlplane.plan.routing_limit import ROUTING_PLAN

KNOB_PLANS: tuple[KnobPlan, ...] = (PLACEMENT_PLAN, ROUTING_PLAN, CAPACITY_PLAN, POOLS_PLAN)
KIND_TO_PLAN: dict[KnobKind, KnobPlan] = {plan.kind: plan for plan in KNOB_PLANS}
