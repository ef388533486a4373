"""The one reconcile path: for a pool, observe -> verify -> plan -> actuate, level-triggered.

Every trigger ends here. The loop calls `reconcile_pool` for every pool each pass (the prefill and decode
pools of a deployment with a latency SLO are sized by the pool planner: reconcile_pools.py); a person's
rebalance and an alert only record a request on the pool (`store.requests`) and then call it at once,
so they can answer with the action. A pending request forces the plan (trigger thresholds skipped,
safety rails kept); an action already in flight on the knob is joined, never doubled
(`actuate.in_flight`). Every change is written by `actuate`; a pool's size is then made real by its
`PoolScaler` (`actuate.scale`). A pool's failure is logged and retried next pass; it never stops the others,
unless the database itself failed (gone, locked, timed out): then the pass ends there, as every other pool
would wait as long. `dry_run` plans and writes nothing. Every writer of a pool holds its lock
(`store.deployments.lock_pool`) from the start of its transaction: the loop, an alert, a person. Where that
lock is SQLite's one write lock, the loop first plans the pool with a dry run and reuses the plan under the
lock when nothing it was made from changed (controlplane/plan_ahead.py): agents' posts never wait for a solve.
The loop also runs the pruning job (controlplane/prune.py) at its bounded rate.

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

from agents.protocol.placement import PlacementTable
from controlplane import reconcile_pools
from controlplane.actuate import change
from controlplane.actuate.fence import SOLE, Fence, NotLeader, guard
from controlplane.actuate.in_flight import in_flight, join
from controlplane.actuate.knobs import KNOBS
from controlplane.actuate.placement import PLACEMENT
from controlplane.actuate.pool_size import POOL_SIZE
from controlplane.actuate.routing import ROUTING
from controlplane.actuate.scale import standing_down, sync_pool_size
from controlplane.actuate.scaler import PoolScaler
from controlplane.compute import Compute, in_process
from controlplane.config import Settings
from controlplane.desired import Decision, Plan, Policy
from controlplane.diagnose import Cause, MtpDiagnosis, diagnose_mtp, diagnose_prefix_hits
from controlplane.liveness import LoopLiveness
from controlplane.observed import PoolState
from controlplane.plan import check_pool_size, plan_pool, plan_routing
from controlplane.plan_ahead import PlannedAhead
from controlplane.prune import Pruning
from controlplane.reconcile_pools import PoolsOutcome
from controlplane.routing_reach import RoutingReach, check_routing_limit
from controlplane.store import (
    actions,
    deployments,
    parks,
    policies,
    pool_sizes,
    pools,
    requests,
    serving,
    tokens,
    windows,
)
from controlplane.store.db import is_unavailable
from controlplane.store.tables import Action, Deployment, Pool, Request
from controlplane.verify import roll_back, verify_pool

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
    where the planner runs (controlplane/compute.py)."""
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
    (controlplane/plan_ahead.py); returns the compute the reconcile under the lock plans through."""
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
        _, policy = policies.active(session, deployment)
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
            state = _roll_back_regression(session, deployment, pool, state, mtp, settings, now)
        with tracer.start_as_current_span("plan"):
            plan = compute(plan_pool, policy, state, now, is_forced=is_forced or bool(pending), mtp=mtp,
                           is_asked=any(r.trigger == "manual" for r in pending))
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
            action, is_new = _actuate_placement(session, deployment, pool, policy, plan, pending, settings, now)
            if plan.decision != Decision.rebalance:  # one change per pass: routing moves when the placement does not
                _actuate_routing(session, deployment, pool, state, policy, settings, now, mtp)
            _record_findings(session, deployment, pool, state, policy, now, mtp)
            reach = _record_routing_reach(session, deployment, pool, state, policy, now)
            _actuate_pool_size(session, deployment, pool, policy, settings, now)
            if sized is not None:
                reconcile_pools.record(session, deployment, sized, now=now)
                reconcile_pools.actuate(session, deployment, pool, policy, sized, settings, now=now)
            if scaler is not None:
                _sync_pool_size(session, deployment, pool, scaler, fence, policy, now)
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


def _actuate_placement(session: Session, deployment: Deployment, pool: Pool, policy: Policy, plan: Plan,
                       pending: list[Request], settings: Settings, now: float) -> tuple[Action | None, bool]:
    """Returns the action the plan made, or the one in flight the requests joined, and whether it is new."""
    if plan.decision != Decision.rebalance and not pending:
        return None, False
    alerts = [alert for request in pending for alert in request.alerts]
    current = in_flight(session, pool, PLACEMENT.kind, policy=policy, window_seconds=settings.window_seconds, now=now)
    if current is not None:
        if not pending:
            return None, False
        join(current, alerts=alerts, now=now)
        return current, False
    if plan.decision != Decision.rebalance:
        return None, False
    trigger, created_by = (pending[0].trigger, pending[0].created_by) if pending else ("loop", tokens.LOOP)
    action = change.propose(session, PLACEMENT, deployment=deployment, pool=pool,
                            value=PlacementTable(plan.change.slot_to_expert, plan.change.slot_share), policy=policy,
                            reason=plan.reason, inputs=plan.inputs, predicted=plan.change.predicted(),
                            trigger=trigger, created_by=created_by, alerts=alerts, now=now)
    return action, action is not None


def _actuate_routing(session: Session, deployment: Deployment, pool: Pool, state: PoolState, policy: Policy,
                     settings: Settings, now: float, mtp: MtpDiagnosis | None) -> None:
    step = plan_routing(policy, state, now, mtp)
    if step.unparked is not None:
        parks.release(session, pool=pool, knob=ROUTING.kind, reason=step.unparked, now=now)
    if not step.is_change_from(state.topk_group):
        return
    if in_flight(session, pool, ROUTING.kind, policy=policy, window_seconds=settings.window_seconds,
                 now=now) is not None:
        return
    windows_used = [w for w in state.windows if w.start >= (state.routing_changed_at or 0.0)]
    windows_used = windows_used[-policy.sustained_windows:]
    recall = [w.ratio("routing_recall_sum", "routing_recall_count") for w in windows_used]
    measured_recall = [r for r in recall if r is not None]
    at_model_limit = state.model_topk_group is None or state.effective_topk_group >= state.model_topk_group
    # recall (against the unconstrained top-k) under the model's own limit: what later recall is judged against
    reference = (sum(measured_recall) / len(measured_recall) if measured_recall else None) if at_model_limit \
        else state.recall_reference
    inputs = {"all2all_share": [round(w.all2all_share or 0.0, 4) for w in windows_used],
              "routing_recall": [round(r, 4) for r in measured_recall], "recall_reference": reference,
              "windows": [w.index for w in windows_used], "topk_group": state.topk_group}
    predicted = {"topk_group_before": state.topk_group, "topk_group_after": step.topk_group}
    if step.effect is not None:
        predicted["effect"] = step.effect.to_json()
    change.propose(session, ROUTING, deployment=deployment, pool=pool, value=step.topk_group, policy=policy,
                   reason=step.reason, inputs=inputs, trigger="loop", created_by=tokens.LOOP, now=now,
                   predicted=predicted)
    log.info("%s/%s: routing %s -> %s (%s)", deployment.name, pool.role, state.topk_group, step.topk_group,
             step.reason)


def _roll_back_regression(session: Session, deployment: Deployment, pool: Pool, state: PoolState,
                          mtp: MtpDiagnosis, settings: Settings, now: float) -> PoolState:
    """MTP acceptance fell under its floor right after a change: that change is reverted and its knob parked."""
    action = session.get(Action, mtp.action_id)
    if action is None or action.status not in (actions.APPLIED, actions.VERIFIED):
        return state
    roll_back(session, KNOBS[action.kind], pool=pool, action=action, state=state, reason=mtp.reason,
              measured=action.measured | {"verdict": mtp.reason}, now=now)
    log.info("%s/%s: rolled back action %d (%s)", deployment.name, pool.role, action.id, mtp.reason)
    return pools.read_state(session, deployment, pool, now=now, settings=settings)


def _actuate_pool_size(session: Session, deployment: Deployment, pool: Pool, policy: Policy, settings: Settings,
                       now: float) -> None:
    """A person's pool size (until the pool planner decides them): each pending request is checked against the
    policy's bounds and GPU budget, and makes an action, joins the one in flight asking the same size, or is
    refused; never while moectl stands down from the pool."""
    for request in requests.pending(session, pool, knob=POOL_SIZE.kind):
        replicas, action = request.value["replicas"], None
        current = in_flight(session, pool, POOL_SIZE.kind, policy=policy, window_seconds=settings.window_seconds,
                            now=now)
        step = check_pool_size(policy, role=pool.role, replicas=replicas,
                               current=pool_sizes.latest(session, pool).replicas, gpus_per_instance=pool.ep_size,
                               other_pools_gpus=pools.other_pools_gpus(session, deployment, pool, settings, now))
        conflict = standing_down(session, pool)
        if conflict is not None:
            outcome = f"refused: moectl stands down from this pool (action {conflict.id}); resume it first"
        elif not step.is_allowed:
            outcome = f"refused: {step.reason}"
        elif current is not None and current.predicted.get("replicas_after") == replicas:
            action, outcome = current, f"joined action {current.id} ({current.status})"
        elif current is not None:
            outcome = (f"refused: action {current.id} ({current.status}, "
                       f"{current.predicted.get('replicas_after')} replicas) is in flight")
        elif not step.is_change:
            outcome = f"kept: {step.reason}"
        else:
            note = (request.value.get("note") or "").strip()
            action = change.propose(session, POOL_SIZE, deployment=deployment, pool=pool, value=replicas,
                                    policy=policy, reason=f"asked by {request.created_by}: {step.reason}"
                                    + (f" ({note})" if note else ""), inputs={"replicas": replicas},
                                    predicted=step.predicted(), trigger=request.trigger,
                                    created_by=request.created_by, now=now)
            outcome = f"action {action.id} {action.status}" if action else "policy mode is off"
        requests.settle(request, outcome=outcome, action_id=action.id if action else None, now=now)


def _sync_pool_size(session: Session, deployment: Deployment, pool: Pool, scaler: PoolScaler, fence: Fence,
                    policy: Policy, now: float) -> None:
    """The platform unreachable keeps the pool's size as it is until a later pass, never its other knobs."""
    try:
        sync_pool_size(session, deployment, pool, scaler, fence, policy, now)
    except NotLeader:
        raise
    except Exception:
        log.exception("%s/%s: could not bring the pool to its size; retrying next pass", deployment.name, pool.role)


def _record_findings(session: Session, deployment: Deployment, pool: Pool, state: PoolState, policy: Policy,
                     now: float, mtp: MtpDiagnosis | None) -> None:
    """Findings go to the audit trail, where the dashboard's timeline shows them: each at most once an hour,
    an MTP diagnosis also whenever its cause changes."""
    recent = [a for a in actions.of_pool(session, pool, since=now - 3600.0, statuses=(actions.RECORDED,))
              if a.kind == "diagnosis"]  # newest first
    last_mtp = next((a for a in recent if a.inputs.get("cause") in set(Cause)), None)
    if mtp is not None and (last_mtp is None or last_mtp.inputs["cause"] != mtp.cause.value):
        actions.record(session, deployment=deployment, pool=pool, kind="diagnosis", trigger="loop",
                       mode=policy.mode.value, status=actions.RECORDED, reason=mtp.reason,
                       inputs=mtp.evidence | {"cause": mtp.cause.value}, predicted={}, created_by=tokens.LOOP, now=now)
    diagnosis = diagnose_prefix_hits(policy, state)
    if diagnosis is None or any(a.inputs.get("cause") == "prefix_hits" for a in recent):
        return
    finding, ratios = diagnosis
    actions.record(session, deployment=deployment, pool=pool, kind="diagnosis", trigger="loop",
                   mode=policy.mode.value, status=actions.RECORDED, reason=finding,
                   inputs={"prefix_hit_ratio": [round(r, 4) for r in ratios], "cause": "prefix_hits"}, predicted={},
                   created_by=tokens.LOOP, now=now)


def _record_routing_reach(session: Session, deployment: Deployment, pool: Pool, state: PoolState, policy: Policy,
                          now: float) -> RoutingReach:
    """A group limit configured but not honoured is recorded (at most once an hour, with the windows that show
    it) for people: no knob of the loop fixes a code path that bypasses it."""
    reach = check_routing_limit(policy, state)
    if reach.is_violated and actions.open_for(session, pool, since=now - 3600.0, kind=ROUTING_LIMIT_VIOLATION,
                                              statuses=(actions.RECORDED,)) is None:
        actions.record(session, deployment=deployment, pool=pool, kind=ROUTING_LIMIT_VIOLATION, trigger="loop",
                       mode=policy.mode.value, status=actions.RECORDED, reason=reach.reason,
                       inputs=reach.evidence(), predicted={}, created_by=tokens.LOOP, now=now)
        log.warning("%s/%s: %s", deployment.name, pool.role, reach.reason)
    return reach


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
            if on_pass is not None:
                try:
                    on_pass(result)
                except Exception:
                    log.exception("reporting a reconcile pass failed")
            stop.wait(wait)
    finally:
        liveness.stopped()
