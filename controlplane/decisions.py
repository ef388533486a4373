"""Turns a plan into an action row and, when the policy's mode allows, into a new placement version.

The one place that writes decisions, whoever asked: the loop, a person (rebalance, approve) or an
alert. Modes: observe records a `planned` action; approve records one `awaiting_approval` with the
proposed table; auto applies it at once.
"""

from __future__ import annotations

from sqlalchemy.orm import Session

from controlplane.desired import Decision, Mode, Plan, Policy
from controlplane.observed import PoolState
from controlplane.solve.routing import RoutingStep
from controlplane.store import actions, placements
from controlplane.store.arrays import pack, unpack
from controlplane.store.tables import Action, Deployment, Pool

STATUS_BY_MODE = {Mode.observe: actions.PLANNED, Mode.approve: actions.AWAITING_APPROVAL, Mode.auto: actions.APPLIED}


def record_plan(session: Session, *, deployment: Deployment, pool: Pool, state: PoolState, policy: Policy,
                plan: Plan, trigger: str, created_by: str, now: float, alerts: list | None = None) -> Action | None:
    """Records a rebalance plan; returns None when the plan is not a rebalance or the mode is off."""
    if plan.decision != Decision.rebalance or policy.mode == Mode.off:
        return None
    change = plan.change
    status = STATUS_BY_MODE[policy.mode]
    predicted = change.predicted()
    action = actions.record(session, deployment=deployment, pool=pool, kind="placement", trigger=trigger,
                            mode=policy.mode.value, status=status, reason=plan.reason, inputs=plan.inputs,
                            predicted=predicted, created_by=created_by, now=now, alerts=alerts)
    action.based_on_version = state.placement_version
    if status == actions.APPLIED:
        _apply(session, pool, action, change.slot_to_expert, change.slot_share, state.placement_version, now)
    elif status == actions.AWAITING_APPROVAL:
        action.proposal = pack(change.slot_to_expert)
        action.proposal_share = None if change.slot_share is None else pack(change.slot_share)
    return action


def record_routing(session: Session, *, deployment: Deployment, pool: Pool, policy: Policy, step: RoutingStep,
                   inputs: dict, trigger: str, created_by: str, now: float) -> Action | None:
    """Records a routing-limit change; auto applies it (agents get it in their next answer)."""
    if policy.mode == Mode.off or not step.is_change_from(pool.topk_group):
        return None
    status = STATUS_BY_MODE[policy.mode]
    action = actions.record(session, deployment=deployment, pool=pool, kind="routing", trigger=trigger,
                            mode=policy.mode.value, status=status, reason=step.reason,
                            inputs=inputs | {"topk_group": pool.topk_group},
                            predicted={"topk_group_before": pool.topk_group, "topk_group_after": step.topk_group},
                            created_by=created_by, now=now)
    if status == actions.APPLIED:
        _apply_routing(pool, step.topk_group, now)
    return action


def _apply_routing(pool: Pool, topk_group: int | None, now: float) -> None:
    pool.topk_group, pool.routing_changed_at = topk_group, now


def approve(session: Session, *, pool: Pool, action: Action, now: float) -> None:
    """Applies a waiting proposal, unless what it changes moved on since it was planned (then superseded)."""
    if action.kind == "routing":
        if action.inputs.get("topk_group") != pool.topk_group:
            actions.settle(action, status=actions.SUPERSEDED, now=now,
                           measured={"reason": f"planned against topk_group {action.inputs.get('topk_group')}, "
                                               f"{pool.topk_group} is applied"})
            return
        _apply_routing(pool, action.predicted["topk_group_after"], now)
        action.status = actions.APPLIED
        return
    current = placements.latest(session, pool).version
    if action.based_on_version != current:
        actions.settle(action, status=actions.SUPERSEDED, now=now,
                       measured={"reason": f"planned against v{action.based_on_version}, v{current} is applied"})
        return
    share = unpack(action.proposal_share) if action.proposal_share is not None else None
    _apply(session, pool, action, unpack(action.proposal), share, current, now)
    action.status = actions.APPLIED


def _apply(session: Session, pool: Pool, action: Action, table, share, current_version: int, now: float) -> None:
    action.placement_version = current_version + 1
    placements.add(session, pool=pool, version=action.placement_version, slot_to_expert=table, slot_share=share,
                   action_id=action.id, now=now)
    action.proposal = action.proposal_share = None
