"""The one reconcile path: for a pool, observe -> verify -> plan -> actuate, level-triggered.

Every trigger ends here. The loop calls `reconcile_pool` for every pool each pass (the prefill and decode pools
of a deployment with a latency SLO are sized by the pool planner: reconcile_pools.py); a person's rebalance and
an alert only record a request on the pool (`store.requests`) and then call it at once, so they can answer with
the action. A pending request forces the plan (trigger thresholds skipped, safety rails kept); an action already
in flight on the knob is joined, never doubled (`actuate.in_flight`). What a plan changes, knob by knob, is in
controlplane/loop/reconcile_knobs.py and what is recorded for people in controlplane/loop/findings.py; every change is
written by `actuate`, and a pool's size is then made real by its `PoolScaler` (`actuate.scale`). A pool's
failure is logged and retried next pass; it never stops the others, unless the database itself failed (gone,
locked, timed out): then the pass ends there, as every other pool would wait as long. `dry_run` plans and writes
nothing. Every writer of a pool holds its lock (`store.deployments.lock_pool`) from the start of its
transaction: the loop, an alert, a person. Where that lock is SQLite's one write lock, the loop first plans the
pool with a dry run and reuses the plan under the lock when nothing it was made from changed
(controlplane/loop/plan_ahead.py): agents' posts never wait for a solve. The loop also runs the pruning job
(controlplane/loop/prune.py) at its bounded rate.

With leader election only the leader reconciles (and prunes): a pass checks the `fence` before each pool,
each commit that wrote is fenced (`actuate.fence.guard`), and a replica that lost the leadership mid-pass
stops there.
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
from controlplane.actuate.placement import PLACEMENT
from controlplane.actuate.scaler import PoolScaler
from controlplane.config import Settings
from controlplane.desired import Decision, Plan
from controlplane.loop import findings, reconcile_knobs, reconcile_pools
from controlplane.loop.compute import Compute, in_process
from controlplane.loop.liveness import LoopLiveness
from controlplane.loop.plan_ahead import PlannedAhead
from controlplane.loop.prune import Pruning
from controlplane.loop.reconcile_pools import PoolsOutcome
from controlplane.loop.verify import verify_pool
from controlplane.plan.diagnose import Cause, MtpDiagnosis, diagnose_mtp
from controlplane.plan.engines import engine_policy
from controlplane.plan.placement import plan_pool, plan_routing
from controlplane.plan.routing_reach import RoutingReach
from controlplane.store import (
    actions,
    deployments,
    parks,
    policies,
    pools,
    requests,
    serving,
    windows,
)
from controlplane.store.db import is_unavailable
from controlplane.store.tables import Action, Deployment, Pool
from controlplane.store.window_reads import next_pass_delay

log = logging.getLogger("moectl.reconcile")
ROUTING_LIMIT_VIOLATION = "routing_limit_violation"  # the action kind of a group limit found not in effect


@dataclass(frozen=True)
class PoolResult:
    plan: Plan
    action: Action | None = None  # the placement action this reconcile made, or the one in flight it joined
    is_new: bool = False  # the action was made now
    parked: tuple[str, ...] = ()  # the pool's knobs parked after this reconcile
    mtp: MtpDiagnosis | None = None  # why MTP acceptance is under its floor, if it is
    pool_plan: PoolsOutcome | None = None  # the deployment's pool plan, when the pool planner sizes it
    reach: RoutingReach | None = None  # whether the group limit in force is honoured (None: dry run)

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
    def pool_plans(self) -> dict[str, PoolsOutcome]:
        """deployment -> its latest pool plan in this pass."""
        return {r.pool_plan.deployment: r.pool_plan for r in self.pools if r.pool_plan is not None}

    @property
    def is_failed(self) -> bool:
        """Nothing was reconciled: the pass could not start (the database gone), or every pool failed."""
        return self.num_errors > 0 and not self.plans


def reconcile_once(sessions: sessionmaker[Session], settings: Settings, *, now: float, dry_run: bool = False,
                   tracer: trace.Tracer | None = None, scaler: PoolScaler | None = None,
                   fence: Fence = SOLE, compute: Compute = in_process) -> PassResult:
    """tracer: spans per pass and per pool (collect -> verify -> plan -> actuate); default: the global one,
    a no-op unless the entry point configured an exporter. scaler: makes pool sizes real (none: sizes are
    only recorded). fence: the leadership (a replica that does not lead plans and writes nothing). compute:
    where the planner runs (controlplane/loop/compute.py)."""
    tracer = tracer or trace.get_tracer("moectl.reconcile")
    started = time.perf_counter()
    plans, results, num_errors = [], [], 0
    with tracer.start_as_current_span("reconcile.pass", attributes={"moectl.dry_run": dry_run}) as span:
        with sessions() as session:
            targets = [(d.id, p.id) for d in deployments.list_all(session) for p in deployments.pools_of(session, d)]
        for deployment_id, pool_id in targets:
            if not dry_run and not fence.is_leading():
                break
            try:
                pool_compute = compute if dry_run else _plan_ahead(sessions, deployment_id, pool_id, settings,
                                                                   now=now, tracer=tracer, compute=compute)
                with sessions() as session, session.begin():
                    guard(session, fence)
                    deployment, pool = session.get(Deployment, deployment_id), session.get(Pool, pool_id)
                    result = reconcile_pool(session, deployment, pool, settings, now=now, dry_run=dry_run,
                                            tracer=tracer, scaler=scaler, fence=fence, compute=pool_compute)
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


def _plan_ahead(sessions: sessionmaker[Session], deployment_id: int, pool_id: int, settings: Settings, *,
                now: float, tracer: trace.Tracer, compute: Compute) -> Compute:
    """Where the pool's lock is the database's one write lock (SQLite), plans the pool with a dry run before
    taking it, so that agents' posts are not held up for as long as the planner solves
    (controlplane/loop/plan_ahead.py); returns the compute the reconcile under the lock plans through."""
    with sessions() as session:
        if not deployments.is_lock_exclusive(session):
            return compute
        planned = PlannedAhead(compute)
        with tracer.start_as_current_span("reconcile.plan_ahead"):
            reconcile_pool(session, session.get(Deployment, deployment_id), session.get(Pool, pool_id), settings,
                           now=now, dry_run=True, tracer=trace.NoOpTracer(), compute=planned)
        return planned


def reconcile_pool(session: Session, deployment: Deployment, pool: Pool, settings: Settings, *, now: float,
                   dry_run: bool = False, is_forced: bool = False, tracer: trace.Tracer | None = None,
                   scaler: PoolScaler | None = None, fence: Fence = SOLE, compute: Compute = in_process) -> PoolResult:
    """Handles the pool's pending requests (each is told the action it led to or joined, or why none).
    is_forced: plan as if a request were pending (a person's dry run asks what a rebalance would do).
    scaler, fence, compute: as for `reconcile_once`; the caller guards `session` with the same fence."""
    tracer = tracer or trace.get_tracer("moectl.reconcile")
    attributes = {"moectl.deployment": deployment.name, "moectl.role": pool.role}
    with tracer.start_as_current_span("reconcile.pool", attributes=attributes) as span:
        if not dry_run:  # one writer of the pool at a time: the loop, an alert, a person (before any read)
            deployments.lock_pool(session, pool)
        policy = engine_policy(policies.active(session, deployment)[1], deployment.engine)
        pending = requests.pending(session, pool, knob=PLACEMENT.kind)
        with tracer.start_as_current_span("collect"):
            state = pools.read_state(session, deployment, pool, now=now, settings=settings)
        if not dry_run:
            with tracer.start_as_current_span("verify"):
                if actions.awaiting_verification(session, pool):  # else nothing to settle: the state stands
                    verify_pool(session, pool, state, policy, now)
                    state = pools.read_state(session, deployment, pool, now=now, settings=settings)
        mtp = diagnose_mtp(policy, state, now)
        if not dry_run and mtp is not None and mtp.cause == Cause.regression:
            state = reconcile_knobs.roll_back_regression(session, deployment, pool, state, mtp, settings, now)
        with tracer.start_as_current_span("plan"):
            plan = compute(plan_pool, policy, state, now, is_forced=is_forced or bool(pending), mtp=mtp,
                           is_asked=any(r.trigger == "manual" for r in pending))
            # one change per pass: routing moves when the placement does not
            routing = None if dry_run or plan.decision == Decision.rebalance else plan_routing(policy, state, now, mtp)
            sized = reconcile_pools.plan_deployment(session, deployment, policy, settings, now=now)
        span.set_attribute("moectl.decision", plan.decision.value)
        log.info("%s/%s: %s (%s)", deployment.name, pool.role, plan.decision.value, plan.reason)
        if sized is not None:
            log.info("%s/%s: pool %s", deployment.name, pool.role, sized.plan.decision(pool.role).reason)
        if dry_run:
            return PoolResult(plan, pool_plan=sized)
        windows.prune(session, pool, history_windows=settings.history_windows, limit=settings.max_prune_rows)
        serving.prune_replicas(session, pool, history_windows=settings.history_windows, limit=settings.max_prune_rows)
        serving.prune_routers(session, deployment, history_windows=settings.history_windows,
                              limit=settings.max_prune_rows)
        with tracer.start_as_current_span("actuate"):
            if plan.unparked is not None:
                parks.release(session, pool=pool, knob=PLACEMENT.kind, reason=plan.unparked, now=now)
            action, is_new = reconcile_knobs.actuate_placement(session, deployment, pool, policy, plan, pending,
                                                               settings, now)
            if routing is not None:
                reconcile_knobs.actuate_routing(session, deployment, pool, state, policy, settings, now, routing)
            findings.record_findings(session, deployment, pool, state, policy, now, mtp)
            reach = findings.record_routing_reach(session, deployment, pool, state, policy, now)
            reconcile_knobs.actuate_pool_size(session, deployment, pool, policy, settings, now)
            if sized is not None:
                reconcile_pools.record(session, deployment, sized, now=now)
                reconcile_pools.actuate(session, deployment, pool, policy, sized, settings, now=now)
            if scaler is not None:
                reconcile_knobs.sync_pool_size_or_retry(session, deployment, pool, scaler, fence, policy, now)
        result = PoolResult(plan, action, is_new, parked=tuple(sorted(parks.active(session, pool))), mtp=mtp,
                            pool_plan=sized, reach=reach)
        for i, request in enumerate(pending):  # the first request made a new action, the others joined it
            outcome = result.outcome if i == 0 else replace(result, is_new=False).outcome
            requests.settle(request, outcome=outcome, action_id=action.id if action else None, now=now)
        return result


def reconcile_requested(session: Session, deployment: Deployment, pool: Pool, settings: Settings, *,
                        now: float, scaler: PoolScaler | None = None, fence: Fence = SOLE) -> None:
    """A trigger's reconcile, once its requests are committed: handles the pool's pending requests unless
    a concurrent reconcile already did (then a storm of deliveries costs one plan, not one each, and most
    of the storm does not even wait for the pool's lock). scaler, fence: as for `reconcile_pool`."""
    if not requests.pending(session, pool, knob=PLACEMENT.kind):
        return
    deployments.lock_pool(session, pool)
    if requests.pending(session, pool, knob=PLACEMENT.kind):  # again: another reconcile may have had the lock
        reconcile_pool(session, deployment, pool, settings, now=now, scaler=scaler, fence=fence)


def run_forever(sessions: sessionmaker[Session], settings: Settings, *, stop: threading.Event,
                liveness: LoopLiveness, clock: Callable[[], float] = time.time,
                on_pass: Callable[[PassResult], None] | None = None, scaler: PoolScaler | None = None,
                fence: Fence = SOLE, compute: Compute = in_process) -> None:
    """Passes until `stop`. No exception ends the loop: a pass that fails (the database gone, a bug) is
    logged, handed to on_pass as one error, and retried after the backoff `liveness` decides."""
    pruning = Pruning(settings, fence=fence)  # after a pass, at most once per prune_seconds
    try:
        while not stop.is_set():
            started = time.perf_counter()
            try:
                result = reconcile_once(sessions, settings, now=clock(), scaler=scaler, fence=fence, compute=compute)
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
