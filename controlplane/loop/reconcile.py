"""The one reconcile path (`Reconciler`): per pool, level-triggered, read -> verify -> decide once
(`plan.decisions.decide`, pure) -> what it proposes per knob (proposals.py, pure) -> written in one loop
(reconcile_knobs.py), with the pool plan and the findings recorded (reconcile_pools.py, findings.py).

Every trigger ends here: the loop's pass (`once`), and a person's or an alert's request, recorded on the pool and
reconciled at once (`requested`). Every writer of a pool holds its lock (`store.deployments.lock_pool`); only
the leader writes, each commit fenced (`actuate.fence.guard`). What the loop does, and why: docs/reference/loop.md.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from opentelemetry import trace
from sqlalchemy.orm import Session, sessionmaker

from controlplane.actuate.fence import SOLE, Fence, NotLeader, guard
from controlplane.actuate.pool_pass import PoolPass
from controlplane.actuate.scaler import PoolScaler
from controlplane.config import Settings
from controlplane.desired import Plan
from controlplane.loop import findings, reconcile_knobs, reconcile_pools
from controlplane.loop.compute import Compute, in_process
from controlplane.loop.liveness import LoopLiveness
from controlplane.loop.plan_ahead import PlannedAhead
from controlplane.loop.proposals import proposals
from controlplane.loop.prune import Pruning
from controlplane.loop.verify import verify_pool
from controlplane.observed.measured_cost import fold_windows
from controlplane.plan.balancer_watch import BalancerWatch
from controlplane.plan.change_cost import change_cost
from controlplane.plan.decisions import PoolInputs, decide
from controlplane.plan.diagnose import Cause, MtpDiagnosis, diagnose_mtp
from controlplane.plan.engines import engine_policy
from controlplane.plan.pools_outcome import PoolsOutcome
from controlplane.plan.routing_reach import RoutingReach
from controlplane.store import (
    actions,
    change_costs,
    deployments,
    parks,
    policies,
    pools,
    requests,
    serving,
    windows,
)
from controlplane.store.db import is_unavailable
from controlplane.store.knobs import PLACEMENT, POOL_SIZE
from controlplane.store.tables import Action, Deployment, Pool
from controlplane.store.window_reads import next_pass_delay

log = logging.getLogger("moectl.reconcile")


@dataclass(frozen=True)
class PoolResult:
    plan: Plan
    action: Action | None = None  # the placement action this reconcile made, or the one in flight it joined
    is_new: bool = False  # the action was made now
    parked: tuple[str, ...] = ()  # the pool's knobs parked after this reconcile
    mtp: MtpDiagnosis | None = None  # why MTP acceptance is under its floor, if it is
    pool_plan: PoolsOutcome | None = None  # the deployment's pool plan, when the pool planner sizes it
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
    def pool_plans(self) -> dict[str, PoolsOutcome]:
        """deployment -> its latest pool plan in this pass."""
        return {r.pool_plan.deployment: r.pool_plan for r in self.pools if r.pool_plan is not None}

    @property
    def is_failed(self) -> bool:
        """Nothing was reconciled: the pass could not start (the database gone), or every pool failed."""
        return self.num_errors > 0 and not self.plans


@dataclass(frozen=True)
class Reconciler:
    """The one reconcile path and what it acts through, built once at the entry point (controlplane/cmd/serve.py).

    `scaler`: makes pool sizes real (none: sizes are only recorded).
    `fence`: the leadership (a replica that does not lead plans and writes nothing).
    `compute`: where the planner runs (controlplane/loop/compute.py).
    `tracer`: spans per pass and per pool (collect -> verify -> plan -> actuate). None: the global one, a no-op
    unless the entry point configured an exporter."""

    settings: Settings
    scaler: PoolScaler | None = None
    fence: Fence = SOLE
    compute: Compute = in_process
    tracer: trace.Tracer | None = None

    @property
    def spans(self) -> trace.Tracer:
        return self.tracer or trace.get_tracer("moectl.reconcile")

    def once(self, sessions: sessionmaker[Session], *, now: float, dry_run: bool = False) -> PassResult:
        """One pass over every pool."""
        tracer = self.spans
        started = time.perf_counter()
        plans, results, num_errors = [], [], 0
        with tracer.start_as_current_span("reconcile.pass", attributes={"moectl.dry_run": dry_run}) as span:
            with sessions() as session:
                targets = [(d.id, p.id) for d in deployments.list_all(session)
                           for p in deployments.pools_of(session, d)]
            for deployment_id, pool_id in targets:
                if not dry_run and not self.fence.is_leading():
                    break
                try:
                    reconciler = self if dry_run else self._plan_ahead(sessions, deployment_id, pool_id, now=now)
                    with sessions() as session, session.begin():
                        guard(session, self.fence)
                        deployment, pool = session.get(Deployment, deployment_id), session.get(Pool, pool_id)
                        result = reconciler.pool(session, deployment, pool, now=now, dry_run=dry_run)
                        plans.append(result.plan)
                        results.append(result)
                except NotLeader as lost:
                    log.warning("lost the leadership mid-pass, nothing of pool %s written: %s", pool_id, lost)
                    break
                except Exception as exc:
                    num_errors += 1
                    span.record_exception(exc)
                    log.exception("reconcile failed for pool %s; retrying next pass", pool_id)
                    if is_unavailable(exc):  # the database itself: the other pools would wait as long
                        break
            span.set_attribute("moectl.pools", len(targets))
            span.set_attribute("moectl.errors", num_errors)
        return PassResult(plans, num_errors, time.perf_counter() - started, results)

    def _plan_ahead(self, sessions: sessionmaker[Session], deployment_id: int, pool_id: int, *,
                    now: float) -> Reconciler:
        """Returns the reconciler that plans under the pool's lock. Where that lock is the database's one write
        lock (SQLite), the pool is planned with a dry run before taking it, so that agents' posts are not held up
        while the planner solves (controlplane/loop/plan_ahead.py)."""
        with sessions() as session:
            if not deployments.is_lock_exclusive(session):
                return self
            planned = PlannedAhead(self.compute)
            with self.spans.start_as_current_span("reconcile.plan_ahead"):
                replace(self, compute=planned, tracer=trace.NoOpTracer()).pool(
                    session, session.get(Deployment, deployment_id), session.get(Pool, pool_id), now=now, dry_run=True)
            return replace(self, compute=planned)

    def pool(self, session: Session, deployment: Deployment, pool: Pool, *, now: float, dry_run: bool = False,
             is_forced: bool = False) -> PoolResult:
        """Handles the pool's pending requests (each is told the action it led to or joined, or why none).
        is_forced: plan as if a request were pending (a person's dry run asks what a rebalance would do).
        The caller guards `session` with `fence`."""
        settings = self.settings
        tracer = self.spans
        attributes = {"moectl.deployment": deployment.name, "moectl.role": pool.role}
        with tracer.start_as_current_span("reconcile.pool", attributes=attributes) as span:
            if not dry_run:  # one writer of the pool at a time: the loop, an alert, a person (before any read)
                deployments.lock_pool(session, pool)
            policy = engine_policy(policies.active(session, deployment)[1], deployment.engine)
            pool_pass = PoolPass(session, deployment, pool, policy, settings, now)
            asked = requests.pending(session, pool)  # every knob's: a request recorded later reconciles itself
            pending = [r for r in asked if r.knob == PLACEMENT.kind]
            with tracer.start_as_current_span("collect"):
                state = pools.read_state(session, deployment, pool, now=now, settings=settings)
            if not dry_run:
                with tracer.start_as_current_span("verify"):
                    if actions.awaiting_verification(session, pool):  # else nothing to settle: the state stands
                        verify_pool(session, pool, state, policy, now)
                        state = pools.read_state(session, deployment, pool, now=now, settings=settings)
            measured = change_costs.read(session, pool)  # what a change costs here, with the windows not yet in it
            folded = fold_windows(measured, state.windows)
            mtp = diagnose_mtp(policy, state, now)
            if not dry_run and mtp is not None and mtp.cause == Cause.regression:
                state = reconcile_knobs.roll_back_regression(pool_pass, state, mtp)
            # what the pool planner reads, after the verdicts above (a size verified or rolled back) and before it plans
            sizing = reconcile_pools.observe(session, deployment, policy, settings, now=now)
            inputs = PoolInputs(state, mtp, sizing, is_forced=is_forced or bool(pending),
                                is_asked=any(r.trigger == "manual" for r in pending), engine=deployment.engine,
                                change_cost=change_cost(deployment.engine, folded))
            with tracer.start_as_current_span("plan"):  # pure: what was read above in, every knob's decision out
                decisions = self.compute(decide, policy, inputs, settings, now)
            plan, sized = decisions.placement, decisions.pools
            span.set_attribute("moectl.decision", plan.decision.value)
            if dry_run:  # nothing acted on: its decisions are the caller's to show (SQLite's plan-ahead runs one
                return PoolResult(plan, pool_plan=sized)  # before every pass, whose own lines would say each twice)
            log.info("%s/%s: %s (%s)", deployment.name, pool.role, plan.decision.value, plan.reason)
            if sized is not None:
                log.info("%s/%s: pool %s", deployment.name, pool.role, sized.plan.decision(pool.role).reason)
            windows.prune(session, pool, history_windows=settings.history_windows, limit=settings.max_prune_rows)
            serving.prune_replicas(session, pool, history_windows=settings.history_windows,
                                   limit=settings.max_prune_rows)
            serving.prune_routers(session, deployment, history_windows=settings.history_windows,
                                  limit=settings.max_prune_rows)
            with tracer.start_as_current_span("actuate"):
                for knob, why in decisions.unparked().items():
                    parks.release(session, pool=pool, knob=knob, reason=why, now=now)
                # a person's size, before the planner's
                reconcile_knobs.actuate_pool_size(pool_pass, [r for r in asked if r.knob == POOL_SIZE.kind])
                made = proposals(decisions, policy, state, pool.role, pending)
                action, is_new = reconcile_knobs.actuate(pool_pass, made, pending)
                if sized is not None:
                    reconcile_pools.record(session, deployment, sized, now=now)
                findings.record_findings(pool_pass, mtp, decisions.prefix_hits)
                findings.record_routing_reach(pool_pass, decisions.reach)
                findings.record_balancer(pool_pass, decisions.balancer)
                if folded is not None and folded != measured:
                    change_costs.write(session, pool, folded, now=now)
                if self.scaler is not None:
                    reconcile_knobs.sync_pool_size_or_retry(pool_pass, self.scaler, self.fence)
            result = PoolResult(plan, action, is_new, parked=tuple(sorted(parks.active(session, pool))), mtp=mtp,
                                pool_plan=sized, reach=decisions.reach, balancer=decisions.balancer)
            for i, request in enumerate(pending):  # the first request made a new action, the others joined it
                outcome = result.outcome if i == 0 else replace(result, is_new=False).outcome
                requests.settle(request, outcome=outcome, action_id=action.id if action else None, now=now)
            return result

    def requested(self, session: Session, deployment: Deployment, pool: Pool, *, now: float) -> None:
        """A trigger's reconcile, once its requests are committed: handles the pool's pending requests unless
        a concurrent reconcile already did. A storm of deliveries then costs one plan, not one each, and most of
        the storm does not even wait for the pool's lock."""
        if not requests.pending(session, pool, knob=PLACEMENT.kind):
            return
        deployments.lock_pool(session, pool)
        if requests.pending(session, pool, knob=PLACEMENT.kind):  # again: another reconcile may have had the lock
            self.pool(session, deployment, pool, now=now)

    def run_forever(self, sessions: sessionmaker[Session], *, stop: threading.Event, liveness: LoopLiveness,
                    clock: Callable[[], float] = time.time,
                    on_pass: Callable[[PassResult], None] | None = None) -> None:
        """Passes until `stop`. No exception ends the loop: a pass that fails (the database gone, a bug) is
        logged, handed to on_pass as one error, and retried after the backoff `liveness` decides."""
        settings = self.settings
        pruning = Pruning(settings, fence=self.fence)  # after a pass, at most once per prune_seconds
        try:
            while not stop.is_set():
                started = time.perf_counter()
                try:
                    result = self.once(sessions, now=clock())
                except Exception:
                    log.exception("reconcile pass failed; retrying after a backoff")
                    result = PassResult([], 1, time.perf_counter() - started)
                pruning.run_if_due(sessions, now=clock())  # never raises: a failed run is tried again when next due
                wait = liveness.passed(is_ok=not result.is_failed)
                if not result.is_failed:  # a failed pass backs off; one that worked waits for the loop's grid
                    wait = next_pass_delay(clock(), settings.reconcile_seconds, settings.window_seconds)
                if on_pass is not None:
                    try:
                        on_pass(result)
                    except Exception:
                        log.exception("reporting a reconcile pass failed")
                stop.wait(wait)
        finally:
            liveness.stopped()
