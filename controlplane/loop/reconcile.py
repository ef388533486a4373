"""The one reconcile path (`Reconciler`): per pool, level-triggered, in named phases under the pool's lock:

1. settle (verify.py `settle`): judge the applied changes on their windows and roll back those that did harm,
   the MTP regression included;
2. `read`: what the pool's plan reads, once, after the verdicts (`store.pools.read_state`, the pool planner's
   view, the pending requests);
3. `decide`: every knob's decision, pure (`plan.decisions.decide`, through the compute);
4. `write`: every knob's proposal (proposals.py) in one loop (reconcile_knobs.py), the pool plan and the
   findings (reconcile_pools.py, findings.py);
5. `answer`: the pool's result, and each pending request told what came of it.

Every trigger ends here: the loop's pass (`run_pass`), and a person's or an alert's request, recorded on the pool
and reconciled at once (`reconcile_requested`). Every writer of a pool holds its lock
(`store.deployments.lock_pool`); only the leader writes, each commit fenced (`actuate.fence.guard`). Pruning is its
own job beside the pass (controlplane/loop/prune.py). What the loop does, and why: docs/reference/loop.md.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

from opentelemetry import trace
from sqlalchemy.orm import Session, sessionmaker

from controlplane.actuate.fence import SOLE, Fence, NotLeader, guard
from controlplane.actuate.pool_pass import PoolPass
from controlplane.actuate.scaler import PoolScaler
from controlplane.config import Settings
from controlplane.desired import Policy
from controlplane.loop import findings, reconcile_knobs, reconcile_pools
from controlplane.loop.compute import Compute, in_process
from controlplane.loop.liveness import LoopLiveness
from controlplane.loop.plan_ahead import PlannedAhead
from controlplane.loop.proposals import proposals
from controlplane.loop.prune import Pruning
from controlplane.loop.results import PassResult, PoolResult
from controlplane.loop.verify import Settlement, settle
from controlplane.observed.measured_cost import fold_windows
from controlplane.observed.pool import PoolState
from controlplane.plan.change_cost import change_cost
from controlplane.plan.change_price import ChangeCost
from controlplane.plan.decisions import Decisions, decide
from controlplane.plan.engines import engine_policy
from controlplane.plan.pool_inputs import PoolInputs
from controlplane.store import change_costs, deployments, parks, policies, pools, requests
from controlplane.store.db import is_unavailable
from controlplane.store.knobs import PLACEMENT, POOL_SIZE
from controlplane.store.tables import Action, Deployment, Pool, Request
from controlplane.store.window_reads import next_pass_delay

log = logging.getLogger("moectl.reconcile")


@dataclass(frozen=True)
class PoolRead:
    """What the read phase gives the pass: the plan's inputs and the requests the pass answers."""

    inputs: PoolInputs
    asked: list[Request]  # every knob's pending requests, oldest first (a request recorded later reconciles itself)
    measured: ChangeCost | None = None  # what a change costs here as stored, before this pass's windows
    folded: ChangeCost | None = None  # the same with this pass's timed switches folded in (written if it moved)

    @property
    def pending(self) -> list[Request]:
        """The placement's requests: the first one's trigger and author go on its action."""
        return _of_knob(self.asked, PLACEMENT.kind)


def _of_knob(asked: list[Request], kind: str) -> list[Request]:
    return [r for r in asked if r.knob == kind]


@dataclass(frozen=True)
class Reconciler:
    """The one reconcile path and what it acts through, built once at the entry point (controlplane/cmd/serve.py).

    `scaler`: makes pool sizes real (none: sizes are only recorded).
    `fence`: the leadership (a replica that does not lead plans and writes nothing).
    `compute`: where the planner runs (controlplane/loop/compute.py).
    `tracer`: spans per pass, per pool and per phase (settle -> read -> decide -> write -> answer). None: the
    global one, a no-op unless the entry point configured an exporter."""

    settings: Settings
    scaler: PoolScaler | None = None
    fence: Fence = SOLE
    compute: Compute = in_process
    tracer: trace.Tracer | None = None

    @property
    def spans(self) -> trace.Tracer:
        return self.tracer or trace.get_tracer("moectl.reconcile")

    def run_pass(self, sessions: sessionmaker[Session], *, now: float, dry_run: bool = False) -> PassResult:
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
                        result = reconciler.reconcile_pool(session, deployment, pool, now=now, dry_run=dry_run)
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
                replace(self, compute=planned, tracer=trace.NoOpTracer()).reconcile_pool(
                    session, session.get(Deployment, deployment_id), session.get(Pool, pool_id), now=now, dry_run=True)
            return replace(self, compute=planned)

    def reconcile_pool(self, session: Session, deployment: Deployment, pool: Pool, *, now: float, dry_run: bool = False,
             is_forced: bool = False) -> PoolResult:
        """One pool's pass, phase by phase (this module's docstring); a dry run settles, writes and answers
        nothing. is_forced: plan as if a request were pending (a person's dry run asks what a rebalance would do).
        The caller guards `session` with `fence`."""
        attributes = {"moectl.deployment": deployment.name, "moectl.role": pool.role}
        with self.spans.start_as_current_span("reconcile.pool", attributes=attributes) as span:
            if not dry_run:  # one writer of the pool at a time: the loop, an alert, a person (before any read)
                deployments.lock_pool(session, pool)
            active = policies.active(session, deployment)
            p = PoolPass(session, deployment, pool, engine_policy(active[1], deployment.engine), self.settings, now)
            state = pools.read_state(session, deployment, pool, now=now, settings=self.settings, active=active)
            if dry_run:
                settled = Settlement()
            else:
                with self.spans.start_as_current_span("settle"):
                    settled = settle(p, state)
            read = self.read(p, None if settled.num_settled else state, is_forced=is_forced)
            decisions = self.decide(read, p.policy, now)
            span.set_attribute("moectl.decision", decisions.placement.decision.value)
            if dry_run:  # nothing acted on nor logged: its decisions are the caller's to show (SQLite's plan-ahead
                return PoolResult(decisions.placement, pool_plan=decisions.pool_plan)  # runs one before every pass)
            action, is_new = self.write(p, read, decisions, settled)
            return self.answer(read, decisions, settled, action, is_new=is_new, now=now)

    def read(self, p: PoolPass, state: PoolState | None, *, is_forced: bool) -> PoolRead:
        """Phase 2: what the plan reads, after the verdicts. `state`: the pool as read before them, when they moved
        nothing (else it is read again)."""
        with self.spans.start_as_current_span("read"):
            asked = requests.pending(p.session, p.pool)
            if state is None:
                state = pools.read_state(p.session, p.deployment, p.pool, now=p.now, settings=p.settings)
            # what the pool planner reads, after the verdicts (a size verified or rolled back) and before it plans
            sizing = reconcile_pools.observe(p.session, p.deployment, p.policy, p.settings, now=p.now)
            pending = _of_knob(asked, PLACEMENT.kind)
            measured = change_costs.read(p.session, p.pool)
            folded = fold_windows(measured, state.windows)
            inputs = PoolInputs(state, sizing, is_forced=is_forced or bool(pending),
                                is_asked=any(r.trigger == "manual" for r in pending), engine=p.deployment.engine,
                                change_cost=change_cost(p.deployment.engine, folded))
            return PoolRead(inputs, asked, measured, folded)

    def decide(self, read: PoolRead, policy: Policy, now: float) -> Decisions:
        """Phase 3, pure: what was read in, every knob's decision out (through the compute). No session."""
        with self.spans.start_as_current_span("decide"):
            return self.compute(decide, policy, read.inputs, self.settings, now)

    def write(self, p: PoolPass, read: PoolRead, decisions: Decisions,
              settled: Settlement) -> tuple[Action | None, bool]:
        """Phase 4: the parks lifted, a person's size, every knob's proposal, the pool plan, the findings, the
        platform brought to the pool's size. Returns the placement action the requests are answered with, and
        whether it is new."""
        session, deployment, pool = p.session, p.deployment, p.pool
        plan, pool_plan = decisions.placement, decisions.pool_plan
        log.info("%s/%s: %s (%s)", deployment.name, pool.role, plan.decision.value, plan.reason)
        sized = None if pool_plan is None else pool_plan.plan.decision_of(pool.role)
        if sized is not None:
            log.info("%s/%s: pool %s", deployment.name, pool.role, sized.reason)
        with self.spans.start_as_current_span("write"):
            for knob, why in decisions.unparked().items():
                parks.release(session, pool=pool, knob=knob, reason=why, now=p.now)
            # a person's size, before the planner's
            reconcile_knobs.actuate_pool_size(p, _of_knob(read.asked, POOL_SIZE.kind))
            made = proposals(decisions, p.policy, read.inputs.state, pool.role, read.pending)
            action, is_new = reconcile_knobs.actuate(p, made, read.pending)
            if pool_plan is not None:
                reconcile_pools.record(session, deployment, pool_plan, now=p.now)
            findings.record_findings(p, settled.regression or decisions.mtp, decisions.prefix_hits)
            findings.record_routing_reach(p, decisions.reach)
            findings.record_balancer(p, decisions.balancer)
            if read.folded is not None and read.folded != read.measured:
                change_costs.write(session, pool, read.folded, now=p.now)
            if self.scaler is not None:
                reconcile_knobs.sync_pool_size_or_retry(p, self.scaler, self.fence)
        return action, is_new

    def answer(self, read: PoolRead, decisions: Decisions, settled: Settlement, action: Action | None, *,
               is_new: bool, now: float) -> PoolResult:
        """Phase 5, from what the pass read and wrote (no new read): the pool's result; each pending placement
        request is told the action it led to or joined, or why none. The knobs parked: those read after the
        verdicts (which park), but the ones the write phase lifted."""
        parked = tuple(sorted(set(read.inputs.state.parked) - set(decisions.unparked())))
        with self.spans.start_as_current_span("answer"):
            result = PoolResult(decisions.placement, action, is_new, parked=parked, pool_plan=decisions.pool_plan,
                                mtp=settled.regression or decisions.mtp, reach=decisions.reach,
                                balancer=decisions.balancer)
            for i, request in enumerate(read.pending):  # the first request made a new action, the others joined it
                outcome = result.outcome if i == 0 else replace(result, is_new=False).outcome
                requests.settle(request, outcome=outcome, action_id=action.id if action else None, now=now)
            return result

    def reconcile_requested(self, session: Session, deployment: Deployment, pool: Pool, *, now: float) -> None:
        """A trigger's reconcile, once its requests are committed: handles the pool's pending requests unless
        a concurrent reconcile already did. A storm of deliveries then costs one plan, not one each, and most of
        the storm does not even wait for the pool's lock."""
        if not requests.pending(session, pool, knob=PLACEMENT.kind):
            return
        deployments.lock_pool(session, pool)
        if requests.pending(session, pool, knob=PLACEMENT.kind):  # again: another reconcile may have had the lock
            self.reconcile_pool(session, deployment, pool, now=now)

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
                    result = self.run_pass(sessions, now=clock())
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
