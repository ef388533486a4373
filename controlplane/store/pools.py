"""Reads a pool's observed state for the planner, in one place."""

from __future__ import annotations

from sqlalchemy import distinct, func, select
from sqlalchemy.orm import Session

from controlplane.config import Settings
from controlplane.desired import Effect, KnobKind, Policy
from controlplane.observed.knob_change import KnobChange
from controlplane.observed.knob_in_force import KnobInForce
from controlplane.observed.knob_park import model_key
from controlplane.observed.pool import PoolState
from controlplane.store import actions, deployments, parks, policies, windows
from controlplane.store.knobs import IN_POOL_STATE, KNOBS, PLACEMENT, POOL_SIZE
from controlplane.store.observed_tables import Agent
from controlplane.store.tables import Action, Deployment, Pool
from controlplane.store.timestamps import seconds
from controlplane.store.window_reads import first_unread_index

HOUR = 3600.0
CHANGED = (actions.APPLIED, actions.VERIFIED, actions.ROLLED_BACK, actions.FAILED)


def _changes(session: Session, pool: Pool, *, since: float, model_limit: int | None,
             num_groups: int) -> tuple[KnobChange, ...]:
    """Applied changes of the pool's knobs made since `since`, oldest first; a change's time is its version's."""
    result = []
    for action in reversed(actions.of_pool(session, pool, since=since, statuses=CHANGED)):
        knob = KNOBS.get(action.kind)
        if action.version is None or knob is None:  # a finding: no version of any knob
            continue
        direction = 0
        if action.kind == KnobKind.routing:
            before, after = (action.predicted.get(k) or model_limit or num_groups
                             for k in ("topk_group_before", "topk_group_after"))
            direction = (after > before) - (after < before)
        elif action.kind == KnobKind.expert_capacity:  # None: no cap, the loosest
            before, after = (action.predicted.get(k) or float("inf") for k in ("factor_before", "factor_after"))
            direction = (after > before) - (after < before)
        stored = knob.versions.get(session, pool, action.version)
        result.append(KnobChange(action.id, action.kind, stored.created_at if stored else seconds(action.created_at),
                                 action.status, direction, Effect.from_json(action.predicted.get("effect"))))
    return tuple(result)


def read_state(session: Session, deployment: Deployment, pool: Pool, *, now: float, settings: Settings,
               num_windows: int | None = None, active: tuple[int, Policy] | None = None) -> PoolState:
    """active: the deployment's active policy with its version (`policies.active`), where the caller read it."""
    model = deployments.model_of(deployment)
    policy_version, policy = active or policies.active(session, deployment)
    agents = deployments.agent_counts(session, pool, now=now, stale_after_seconds=settings.stale_after_seconds,
                                      gone_after_seconds=settings.agent_gone_seconds)
    applied = PLACEMENT.versions.latest(session, pool)
    latest = {knob.kind: knob.versions.latest(session, pool) for knob in IN_POOL_STATE}
    last_hour = PLACEMENT.versions.recent(session, pool, since=now - HOUR)
    moved = 0
    previous = PLACEMENT.versions.get(session, pool, last_hour[0].version - 1) if last_hour else None
    for placement in last_hour:
        if previous is not None:
            moved += int((placement.value.slot_to_expert != previous.value.slot_to_expert).sum())
        previous = placement
    current_index = first_unread_index(now, settings.window_seconds)
    recent = windows.recent(session, pool, before_index=current_index,
                            limit=num_windows or settings.history_windows)
    return PoolState(
        deployment=deployment.name, role=pool.role, num_layers=model.num_layers, num_experts=model.num_experts,
        num_groups=model.num_groups, ep_size=pool.ep_size, slots_per_rank=pool.slots_per_rank,
        gpus_per_node=pool.gpus_per_node, num_agents=agents.total, num_fresh_agents=agents.fresh,
        num_gone_agents=agents.gone,
        placement_version=applied.version, slot_to_expert=applied.value.slot_to_expert, windows=tuple(recent),
        slot_share=applied.value.slot_share,
        last_change_at=applied.created_at if applied.version > 0 else None, moved_slots_last_hour=moved,
        in_force={kind: KnobInForce.issued(v.version, v.value, v.created_at) for kind, v in latest.items()},
        top_k=model.top_k,
        model_topk_group=model.topk_group, model_key=model_key(deployment.model), policy_version=policy_version,
        parked=parks.active(session, pool),
        changes=_changes(session, pool, since=now - max(HOUR, policy.flap_window_seconds),
                         model_limit=model.topk_group, num_groups=model.num_groups),
        recall_reference=_recall_reference(session, latest[KnobKind.routing].action_id),
        num_actions_last_hour=actions.count_since(session, pool, since=now - HOUR,
                                                  statuses=(actions.APPLIED, actions.VERIFIED, actions.ROLLED_BACK)))


def fresh_instances(session: Session, pool: Pool, settings: Settings, now: float) -> int:
    """Instances of the pool with an agent that reported within the staleness limit."""
    since = now - settings.stale_after_windows * settings.window_seconds
    return session.scalar(select(func.count(distinct(Agent.instance)))
                          .where(Agent.pool_id == pool.id, Agent.last_seen >= since)) or 0


def _recall_reference(session: Session, action_id: int | None) -> float | None:
    """The recall under the model's own limit, as the action that made the routing limit in force recorded it."""
    action = session.get(Action, action_id) if action_id is not None else None
    return None if action is None else action.inputs.get("recall_reference")


def other_pools_gpus(session: Session, deployment: Deployment, pool: Pool, settings: Settings, now: float) -> int:
    """GPUs the deployment's other pools use: each one's size (moectl's latest, else its instances reporting
    fresh windows) times the GPUs of an instance (its EP size)."""
    total = 0
    for other in deployments.pools_of(session, deployment):
        if other.id == pool.id:
            continue
        replicas = POOL_SIZE.versions.latest(session, other).value
        if replicas is None:
            replicas = fresh_instances(session, other, settings, now)
        total += replicas * other.ep_size
    return total
