"""What a pool's pass and a whole pass come to (`Reconciler.reconcile_pool`, `Reconciler.run_pass`,
controlplane/loop/reconcile.py): what the triggers answer, the metrics export (controlplane/cmd/serve.py) and the
API shows."""

from __future__ import annotations

from dataclasses import dataclass, field

from controlplane.desired import Plan
from controlplane.plan.balancer_watch import BalancerWatch
from controlplane.plan.diagnose import MtpDiagnosis
from controlplane.plan.pool_plan import PoolPlan
from controlplane.plan.routing_reach import RoutingReach
from controlplane.store.tables import Action


@dataclass(frozen=True)
class PoolResult:
    plan: Plan
    action: Action | None = None  # the placement action this reconcile made, or the one in flight it joined
    is_new: bool = False  # the action was made now
    parked: tuple[str, ...] = ()  # the pool's knobs parked after this reconcile
    mtp: MtpDiagnosis | None = None  # why MTP acceptance is under its floor, if it is
    pool_plan: PoolPlan | None = None  # the deployment's pool plan, when the pool planner sizes it
    reach: RoutingReach | None = None  # whether the group limit in force is honoured (None: dry run)
    balancer: BalancerWatch | None = None  # whether the engine's own balancer still acts (None: dry run)

    @property
    def outcome(self) -> str:
        """What came of the pool's requests, as the triggers report it."""
        if self.action is None:
            return f"{self.plan.decision.value}: {self.plan.reason}"
        if self.is_new:
            return f"action {self.action.id} {self.action.status}"
        return f"joined action {self.action.id} ({self.action.status})"


@dataclass(frozen=True)
class PassResult:
    plans: list[Plan]
    num_errors: int
    seconds: float
    pools: list[PoolResult] = field(default_factory=list)

    @property
    def reaches(self) -> list[RoutingReach]:
        return [r.reach for r in self.pools if r.reach is not None]

    @property
    def balancers(self) -> list[BalancerWatch]:
        return [r.balancer for r in self.pools if r.balancer is not None]

    @property
    def pool_plans(self) -> dict[str, PoolPlan]:
        """deployment -> its latest pool plan in this pass."""
        return {r.pool_plan.deployment: r.pool_plan for r in self.pools if r.pool_plan is not None}

    @property
    def is_failed(self) -> bool:
        """Nothing was reconciled: the pass could not start (the database gone), or every pool failed."""
        return self.num_errors > 0 and not self.plans
