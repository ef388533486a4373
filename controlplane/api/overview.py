"""Builds the overview of a deployment from the store: the numbers people and `moectl status` read."""

from __future__ import annotations

import functools

from sqlalchemy.orm import Session

from controlplane.api import pool_overview
from controlplane.api.overview_schemas import (
    ChangeCostOut,
    DiagnosisOut,
    Latency,
    Overview,
    ParkedOut,
    PoolOverview,
    PricedChangeOut,
    Queue,
    RoutingReachOut,
    WindowPoint,
)
from controlplane.api.schemas import ActionOut, AgentsHealth
from controlplane.config import Settings
from controlplane.desired import KnobKind, Policy
from controlplane.observed.pool import PoolState
from controlplane.observed.report import merge_counters
from controlplane.observed.window import Window, acceptance_by_position, dropped_share
from controlplane.plan.change_cost import change_cost
from controlplane.plan.diagnose import diagnose_mtp
from controlplane.plan.engines import RAILS
from controlplane.plan.routing_reach import check_routing_limit, window_reach
from controlplane.solve.placement.packing import imbalance_floor
from controlplane.store import actions, change_costs, deployments, policies, pools
from controlplane.store.tables import Action, Deployment, Pool
from controlplane.store.timestamps import seconds

MAX_HISTORY = 60


def _point(window: Window, state: PoolState) -> WindowPoint:
    reach = window_reach(window, None)
    return WindowPoint(index=window.index, start=window.start, placement_version=window.placement_version,
                       imbalance=window.imbalance(state.ep_size), all2all_share=window.all2all_share,
                       routing_recall=state.routing_recall(window),
                       prefix_hit_ratio=window.ratio("prefix_hit_tokens", "prefix_query_tokens"),
                       mtp_acceptance=window.ratio("spec_accepted_tokens", "spec_draft_tokens"),
                       tokens=int(window.expert_tokens[0].sum()) if len(window.expert_tokens) else 0,
                       groups_per_token=reach.groups_mean if reach else None,
                       nodes_per_token=reach.nodes_mean if reach else None,
                       step_imbalance=window.step_imbalance())


def _routing_reach(policy: Policy, state: PoolState) -> RoutingReachOut:
    reach = check_routing_limit(policy, state)
    last = reach.last
    measured = {} if last is None else {
        "groups_per_token_mean": last.groups_mean, "groups_per_token_max": last.groups_max,
        "nodes_per_token_mean": last.nodes_mean, "nodes_per_token_max": last.nodes_max,
        "over_limit_share": last.over_limit_share}
    return RoutingReachOut(topk_group=reach.limit, is_violated=reach.is_violated, reason=reach.reason, **measured)


def _agents(session: Session, pool: Pool, state: PoolState, *, now: float,
            settings: Settings) -> tuple[AgentsHealth, int | None]:
    """The pool's agent counts, and the placement version every fresh agent runs (None: mixed or none)."""
    fresh = [a for a in deployments.find_agents(session, pool)
             if deployments.agent_state(a, now=now, stale_after_seconds=settings.stale_after_seconds,
                                        gone_after_seconds=settings.agent_gone_seconds) == "fresh"]
    versions = {a.placement_version for a in fresh}
    applied = versions.pop() if len(versions) == 1 else None
    faulty = {a.instance: a.adapter_faults for a in fresh if a.adapter_faults}
    unhealthy = [f"{instance}: " + ", ".join(f"{cause} x{n}" for cause, n in sorted(faults.items()))
                 for instance, faults in sorted(faulty.items())]
    return AgentsHealth(total=state.num_agents, fresh=state.num_fresh_agents,
                        stale=state.num_agents - state.num_fresh_agents, gone=state.num_gone_agents,
                        unhealthy=unhealthy), applied


def action_out(action: Action, role_of: dict[int, str]) -> ActionOut:
    return ActionOut(id=action.id, role=role_of.get(action.pool_id), kind=action.kind, trigger=action.trigger,
                     mode=action.mode, status=action.status, reason=action.reason, inputs=action.inputs,
                     predicted=action.predicted, measured=action.measured,
                     placement_version=action.version if action.kind == KnobKind.placement else None,
                     alerts=action.alerts or [],
                     created_by=action.created_by,
                     created_at=seconds(action.created_at), updated_at=seconds(action.updated_at))


def _change_cost(session: Session, deployment: Deployment, pool: Pool) -> ChangeCostOut:
    measured = change_costs.read(session, pool)
    cost = change_cost(deployment.engine, measured)
    return ChangeCostOut(seconds=round(cost.stall_seconds, 4), source=cost.source,
                         num_measured=measured.num_measured if measured else 0,
                         last_seconds=round(measured.last_seconds, 4) if measured else None)


MAX_PRICED_CHANGES = 5
MADE = (actions.APPLIED, actions.VERIFIED, actions.ROLLED_BACK, actions.FAILED, actions.SUPERSEDED)
PRICE_KEYS = ("is_paying", "gain_share", "horizon_seconds", "gain_seconds", "cost_seconds", "cost_source", "margin")


def _priced_changes(session: Session, pool: Pool, now: float) -> list[PricedChangeOut]:
    """The pool's last placement changes that carry a price, newest first (the last day's)."""
    made = [a for a in actions.of_pool(session, pool, since=now - 86400.0, statuses=MADE)
            if a.kind == "placement" and a.predicted.get("price")]
    return [PricedChangeOut(action_id=a.id, at=seconds(a.created_at), status=a.status,
                            predicted={k: a.predicted["price"].get(k) for k in PRICE_KEYS},
                            realised=a.measured.get("realised")) for a in made[:MAX_PRICED_CHANGES]]


def build(session: Session, deployment: Deployment, settings: Settings, now: float,
          num_actions: int = 10) -> Overview:
    policy_version, policy = policies.active(session, deployment)
    pool_views, last_windows, role_of = [], [], {}
    all_pools = deployments.pools_of(session, deployment)
    for pool in all_pools:
        role_of[pool.id] = pool.role
        state = pools.read_state(session, deployment, pool, now=now, settings=settings, num_windows=MAX_HISTORY)
        health, applied = _agents(session, pool, state, now=now, settings=settings)
        history = [_point(w, state) for w in state.windows]
        mtp = diagnose_mtp(policy, state, now)
        pool_views.append(PoolOverview(role=pool.role, ep_size=pool.ep_size, slots_per_rank=pool.slots_per_rank,
                                       placement_version=state.placement_version,
                                       applied_placement_version=applied, topk_group=state.topk_group,
                                       expert_capacity_factor=state.knob(KnobKind.expert_capacity).value,
                                       dropped_share=dropped_share(state.windows[-1:]),
                                       imbalance=history[-1].imbalance if history else None,
                                       imbalance_floor=imbalance_floor(state.windows[-1].expert_tokens,
                                                                       state.num_slots, state.ep_size)
                                       if state.windows else None,
                                       agents=health, history=history,
                                       parked=[ParkedOut(knob=p.knob, since=p.since, action_id=p.action_id,
                                                         reason=p.reason) for p in state.parked.values()],
                                       mtp_diagnosis=None if mtp is None else DiagnosisOut(
                                           cause=mtp.cause.value, reason=mtp.reason, evidence=mtp.evidence),
                                       routing_reach=_routing_reach(policy, state),
                                       change_cost=_change_cost(session, deployment, pool),
                                       priced_changes=_priced_changes(session, pool, now)))
        if state.windows:
            last_windows.append(state.windows[-1])
    total = functools.reduce(merge_counters, (w.counters for w in last_windows), {})

    def ratio(numerator: str, denominator: str) -> float | None:
        return total[numerator] / total[denominator] if total.get(denominator, 0) > 0 else None

    imbalances = [p.imbalance for p in pool_views if p.imbalance is not None]
    return Overview(
        deployment=deployment.name, model=deployments.model_of(deployment), mode=policy.mode.value,
        engine=deployment.engine, engine_applies=RAILS.get(deployment.engine, RAILS["bundled"]).applies,
        policy_version=policy_version, imbalance=max(imbalances) if imbalances else None,
        all2all_share=(total.get("dispatch_seconds", 0) + total.get("combine_seconds", 0)) / total["forward_seconds"]
        if total.get("forward_seconds", 0) > 0 else None,
        prefix_hit_ratio=ratio("prefix_hit_tokens", "prefix_query_tokens"),
        mtp_acceptance=ratio("spec_accepted_tokens", "spec_draft_tokens"),
        mtp_acceptance_by_position=acceptance_by_position([total]),
        queue=Queue(running=int(total.get("requests_running", 0)), waiting=int(total.get("requests_waiting", 0))),
        ttft_seconds=Latency(mean=ratio("ttft_sum", "ttft_count"), p99=total.get("ttft_p99") or None),
        itl_seconds=Latency(mean=ratio("itl_sum", "itl_count"), p99=total.get("itl_p99") or None),
        placement_version={p.role: p.applied_placement_version for p in pool_views},
        agents=AgentsHealth(total=sum(p.agents.total for p in pool_views),
                            fresh=sum(p.agents.fresh for p in pool_views),
                            stale=sum(p.agents.stale for p in pool_views),
                            gone=sum(p.agents.gone for p in pool_views)),
        pools=pool_views,
        last_actions=[action_out(a, role_of) for a in actions.recent(session, deployment, limit=num_actions)],
        updated_at=now, pool_plan=pool_overview.plan_out(session, deployment, all_pools),
        pool_history=pool_overview.history(session, deployment, all_pools, settings, now, MAX_HISTORY))

