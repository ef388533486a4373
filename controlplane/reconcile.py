"""The loop: for each pool, observe -> plan -> actuate -> verify, level-triggered.

Each pass recomputes what should be from stored windows and the active policy, and makes at most
one bounded change per pool. A pool's failure is logged and retried next pass; it never stops the
others. `dry_run` plans and logs but writes nothing.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from opentelemetry import trace
from sqlalchemy.orm import Session, sessionmaker

from controlplane import decisions
from controlplane.config import Settings
from controlplane.desired import Decision, Plan, VerifyOutcome
from controlplane.plan import diagnose_prefix_hits, plan_pool, plan_routing, verify_change
from controlplane.store import actions, deployments, placements, policies, pools, windows
from controlplane.store.tables import Deployment, Pool

log = logging.getLogger("moectl.reconcile")


@dataclass(frozen=True)
class PassResult:
    plans: list[Plan]
    num_errors: int
    seconds: float


def reconcile_once(sessions: sessionmaker[Session], settings: Settings, *, now: float, dry_run: bool = False,
                   tracer: trace.Tracer | None = None) -> PassResult:
    """tracer: spans per pass and per pool (collect -> plan -> actuate -> verify); default: the global one,
    a no-op unless the entry point configured an exporter."""
    tracer = tracer or trace.get_tracer("moectl.reconcile")
    started = time.perf_counter()
    plans, num_errors = [], 0
    with tracer.start_as_current_span("reconcile.pass", attributes={"moectl.dry_run": dry_run}) as span:
        with sessions() as session:
            targets = [(d.id, p.id) for d in deployments.list_all(session) for p in deployments.pools_of(session, d)]
        for deployment_id, pool_id in targets:
            try:
                with sessions() as session, session.begin():
                    deployment, pool = session.get(Deployment, deployment_id), session.get(Pool, pool_id)
                    plans.append(_reconcile_pool(session, deployment, pool, settings, now=now, dry_run=dry_run,
                                                 tracer=tracer))
            except Exception as exc:
                num_errors += 1
                span.record_exception(exc)
                log.exception("reconcile failed for pool %s; retrying next pass", pool_id)
        span.set_attribute("moectl.pools", len(targets))
        span.set_attribute("moectl.errors", num_errors)
    return PassResult(plans, num_errors, time.perf_counter() - started)


def _reconcile_pool(session: Session, deployment: Deployment, pool: Pool, settings: Settings, *, now: float,
                    dry_run: bool, tracer: trace.Tracer) -> Plan:
    attributes = {"moectl.deployment": deployment.name, "moectl.role": pool.role}
    with tracer.start_as_current_span("reconcile.pool", attributes=attributes) as span:
        _, policy = policies.active(session, deployment)
        with tracer.start_as_current_span("collect"):
            state = pools.read_state(session, deployment, pool, now=now, settings=settings)
        if not dry_run:
            with tracer.start_as_current_span("verify"):
                _verify(session, deployment, pool, state, policy, now)
                state = pools.read_state(session, deployment, pool, now=now, settings=settings)
        with tracer.start_as_current_span("plan"):
            plan = plan_pool(policy, state, now)
        span.set_attribute("moectl.decision", plan.decision.value)
        if not dry_run and state.windows:
            windows.prune(session, pool, keep_from_index=state.windows[-1].index - settings.history_windows)
        log.info("%s/%s: %s (%s)", deployment.name, pool.role, plan.decision.value, plan.reason)
        if dry_run:
            return plan
        with tracer.start_as_current_span("actuate"):
            if plan.decision == Decision.rebalance:
                _actuate(session, deployment, pool, state, policy, plan, settings, now)
            else:  # one change per pass: routing limits move only when the placement does not
                _actuate_routing(session, deployment, pool, state, policy, settings, now)
            _record_findings(session, deployment, pool, state, policy, now)
        return plan


def _record_findings(session: Session, deployment: Deployment, pool: Pool, state, policy, now: float) -> None:
    """Findings go to the audit trail at most once an hour each, where the dashboard's timeline shows them."""
    diagnosis = diagnose_prefix_hits(policy, state)
    if diagnosis is None or actions.open_for(session, pool, since=now - 3600.0, kind="diagnosis",
                                             statuses=(actions.RECORDED,)) is not None:
        return
    finding, ratios = diagnosis
    actions.record(session, deployment=deployment, pool=pool, kind="diagnosis", trigger="loop",
                   mode=policy.mode.value, status=actions.RECORDED, reason=finding,
                   inputs={"prefix_hit_ratio": [round(r, 4) for r in ratios]}, predicted={}, created_by="loop",
                   now=now)


def _actuate(session: Session, deployment: Deployment, pool: Pool, state, policy, plan: Plan, settings: Settings,
             now: float) -> None:
    """Records (and in auto mode applies) the plan."""
    # one proposal at a time: the same plan recorded again each pass would only be noise, and a proposal
    # waiting for a person stands until decided (approving a stale one supersedes it)
    since = now - max(policy.cooldown_seconds, settings.window_seconds)
    is_open = (actions.open_for(session, pool, since=since, statuses=(actions.PLANNED, *actions.IN_FLIGHT))
               or actions.open_for(session, pool, since=0.0, statuses=(actions.AWAITING_APPROVAL,)))
    if not is_open:
        decisions.record_plan(session, deployment=deployment, pool=pool, state=state, policy=policy, plan=plan,
                              trigger="loop", created_by="loop", now=now)


def _actuate_routing(session: Session, deployment: Deployment, pool: Pool, state, policy, settings: Settings,
                     now: float) -> None:
    step = plan_routing(policy, state, now)
    if not step.is_change_from(pool.topk_group):
        return
    if actions.open_for(session, pool, since=now - max(policy.cooldown_seconds, settings.window_seconds),
                        kind="routing", statuses=(actions.PLANNED, *actions.IN_FLIGHT)) is not None:
        return
    windows_used = state.windows[-policy.sustained_windows:]
    inputs = {"all2all_share": [round(w.all2all_share or 0.0, 4) for w in windows_used],
              "windows": [w.index for w in windows_used]}
    decisions.record_routing(session, deployment=deployment, pool=pool, policy=policy, step=step, inputs=inputs,
                             trigger="loop", created_by="loop", now=now)
    log.info("%s/%s: routing %s -> %s (%s)", deployment.name, pool.role, pool.topk_group, step.topk_group,
             step.reason)


def _verify(session: Session, deployment: Deployment, pool: Pool, state, policy, now: float) -> None:
    """Settles applied changes; rolls one back (re-issuing the previous table) when it made things worse."""
    for action in actions.awaiting_verification(session, pool):
        if action.kind == "routing":
            _verify_routing(action, state, policy, now)
            continue
        prior = (action.inputs.get("measured_imbalance") or [None])[-1]
        if prior is None or action.placement_version is None:
            actions.settle(action, status=actions.VERIFIED, measured={}, now=now)
            continue
        outcome, measured = verify_change(policy, state, action.placement_version, prior)
        if outcome == VerifyOutcome.wait:
            continue
        result = {"imbalance_after": round(measured, 4), "imbalance_before": prior}
        status = outcome.value
        if outcome == VerifyOutcome.rolled_back:
            if action.placement_version == state.placement_version:
                previous = placements.get(session, pool, action.placement_version - 1)
                placements.add(session, pool=pool, version=state.placement_version + 1,
                               slot_to_expert=previous.slot_to_expert, slot_share=previous.slot_share,
                               action_id=action.id, now=now)
                result["restored_version"] = state.placement_version + 1
            else:  # worse, but a later placement already replaced it: nothing to restore
                status = actions.FAILED
        actions.settle(action, status=status, measured=result, now=now)


def _verify_routing(action, state, policy, now: float) -> None:
    """Records the all-to-all share measured under the new limit once enough windows ran under it."""
    after = [w.all2all_share for w in state.windows
             if w.start >= (state.routing_changed_at or now) and w.all2all_share is not None]
    if len(after) < policy.verify_windows:
        return
    before = action.inputs.get("all2all_share") or []
    measured = {"all2all_share_after": round(sum(after) / len(after), 4),
                "all2all_share_before": round(sum(before) / len(before), 4) if before else None}
    actions.settle(action, status=actions.VERIFIED, measured=measured, now=now)


def run_forever(sessions: sessionmaker[Session], settings: Settings, *, stop: threading.Event,
                clock: Callable[[], float] = time.time, on_pass: Callable[[PassResult], None] | None = None) -> None:
    while not stop.is_set():
        result = reconcile_once(sessions, settings, now=clock())
        if on_pass is not None:
            on_pass(result)
        stop.wait(settings.reconcile_seconds)

