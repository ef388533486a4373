"""The planner: pure. (policy, observed pool, now) -> Plan for the placement and a step for the routing limit.

Hysteresis lives here. A change needs a sustained signal, fresh data from a quorum of agents, a cooldown
since the last change, room in the moves budget, and a predicted effect worth the change. (The change
carries that effect, to be verified against: controlplane/plan/effect.py.) A knob parked after a reverted change stays
put until its inputs change materially (controlplane/plan/parking.py); a knob's direction is not reversed within
the policy's flap window.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from agents.protocol.placement import PlacementTable
from controlplane.desired import (
    Decision,
    Effect,
    KnobKind,
    Mode,
    PlacementChange,
    Plan,
    Policy,
    PoolSizeStep,
    ReplicaBounds,
)
from controlplane.learn.forecast import forecast_ahead
from controlplane.observed.pool import LOAD_SPAN_SECONDS, PoolState, imbalance_had_it_run
from controlplane.plan.diagnose import Cause, MtpDiagnosis
from controlplane.plan.pacing import HOUR, placement_allowance
from controlplane.plan.parking import material_change
from controlplane.solve.placement.algorithm import MigrationAware, PlacementAlgorithm
from controlplane.solve.placement.packing import imbalance_floor
from controlplane.solve.placement.solver import Topology
from controlplane.solve.placement.step_split import solve_for_split
from controlplane.solve.routing import RECALL_TOLERANCE, GroupLimits, RoutingStep, plan_topk_group

MAX_FORECAST_WINDOWS = 48  # 4 minutes of 5 s windows: the level's and the trend's history (learn/forecast.py)
MIGRATION_AWARE = MigrationAware()


def pool_topology(pool: PoolState) -> Topology:
    """Nodes own consecutive ranks; an EP group smaller than a node is one node."""
    gpus_per_node = pool.gpus_per_node if pool.ep_size % pool.gpus_per_node == 0 else pool.ep_size
    return Topology(num_nodes=pool.ep_size // gpus_per_node, gpus_per_node=gpus_per_node,
                    slots_per_gpu=pool.slots_per_rank, num_groups=pool.num_groups)


def split_step_tokens(pool: PoolState, windows) -> float | None:
    """Token-expert assignments one step of one EP group routes per MoE layer, if the pool's ranks route by the
    dispatch-time split over most of `windows`' load (their StepLoad says so); None otherwise: the window-mean
    objective then applies (solve/placement/step_split.py)."""
    steps = [w.step_imbalance() for w in windows]
    routed = [s["routed"] for s in steps if s is not None]
    if not routed or np.mean(routed) <= 0.5:
        return None
    w = windows[-1]
    num_group_steps = w.counters.get("num_steps", 0.0) / pool.ep_size  # ranks step in lockstep
    num_layers = max(w.expert_tokens.shape[0], 1)
    return float(w.expert_tokens.sum()) / num_layers / num_group_steps if num_group_steps > 0 else None


def parked_reason(pool: PoolState, knob: str, *, with_expert_share: bool) -> tuple[str | None, str | None]:
    """(why the knob stays parked, why it no longer is): both None when it is not parked."""
    parked = pool.parked.get(knob)
    if parked is None:
        return None, None
    why = material_change(parked.inputs, pool.knob_inputs(with_expert_share=with_expert_share))
    if why is not None:
        return None, why
    return f"{knob} parked since action {parked.action_id}: {parked.reason} (until the model, the policy or the " \
           f"load changes)", None


def _context(policy: Policy, pool: PoolState, windows) -> tuple[dict[str, float], dict[str, float]]:
    """The floors a change must keep (those not already broken) and the signals before it, as evidence."""
    signals = pool.signals(windows)
    context = {k: v for k, v in signals.items() if v is not None}
    acceptance = signals["mtp_acceptance"]
    floors = {}
    if policy.mtp_acceptance_floor is not None and acceptance is not None and acceptance >= policy.mtp_acceptance_floor:
        floors["mtp_acceptance"] = policy.mtp_acceptance_floor
    return floors, context


def plan_pool(policy: Policy, pool: PoolState, now: float, *, is_forced: bool = False, is_asked: bool = False,
              mtp: MtpDiagnosis | None = None, algorithm: PlacementAlgorithm = MIGRATION_AWARE) -> Plan:
    """`is_forced`: a person or an alert asked for a rebalance. The trigger thresholds are skipped;
    the data hygiene, cooldown, budgets and the minimum gain still hold. `is_asked`: a person asked, which also
    lifts a park (they see its evidence). `mtp`: the MTP diagnosis; only load skew leads to a rebalance.
    `algorithm`: what solves the placement (solve/placement/algorithm.py). The policy's min_gain_per_moved_slot
    applies to the controller's own (MigrationAware); another algorithm has no such bar."""
    unparked, shape_limit = None, ""

    def plan(decision: Decision, reason: str, change: PlacementChange | None = None, **inputs) -> Plan:
        if unparked is not None and decision == Decision.rebalance:
            reason = f"{reason} (unparked: {unparked})"
        return Plan(pool.deployment, pool.role, decision, reason + shape_limit, inputs, change, unparked)

    if policy.mode == Mode.off:
        return plan(Decision.keep, "policy mode is off")
    if pool.num_agents == 0 or pool.num_fresh_agents < policy.min_fresh_agents_fraction * pool.num_agents:
        return plan(Decision.hold, f"only {pool.num_fresh_agents}/{pool.num_agents} agents are fresh")
    num_needed = 1 if is_forced else policy.sustained_windows
    windows = pool.current_windows()[-policy.sustained_windows:]
    if len(windows) < num_needed:
        return plan(Decision.hold, f"{len(windows)} complete windows under placement v{pool.placement_version},"
                                   f" need {num_needed}")
    measured = [w.imbalance(pool.ep_size) for w in windows]
    if any(m is None for m in measured):
        return plan(Decision.hold, "a recent window misses some rank's expert load (or carries none)")
    inputs = {"measured_imbalance": [round(m, 4) for m in measured], "windows": [w.index for w in windows],
              "placement_version": pool.placement_version}
    floor = imbalance_floor(windows[-1].expert_tokens, pool.num_slots, pool.ep_size)
    if floor is not None:
        inputs["imbalance_floor"] = round(floor, 4)
        if floor > policy.imbalance_threshold:  # no plan can meet the threshold: say so, or people blame the loop
            shape_limit = (f"; the pool's shape is the limit: no placement of its {pool.num_slots} slots on "
                           f"{pool.ep_size} GPUs gets under {floor:.3f} on this load (more slots per GPU lift it: "
                           f"`moectl slots {pool.deployment} --role {pool.role}`)")
    # the seeds' loop: acceptance persistently under its floor, diagnosed as load skew, asks for a rebalance
    is_acceptance_low = mtp is not None and mtp.cause == Cause.skew
    if is_acceptance_low:
        inputs["mtp_acceptance"] = mtp.evidence["mtp_acceptance"]
    if not is_forced and not is_acceptance_low and min(measured) <= policy.imbalance_threshold:
        return plan(Decision.keep, f"imbalance {measured[-1]:.3f} within threshold "
                                   f"{policy.imbalance_threshold}", **inputs)
    still_parked, unparked = parked_reason(pool, KnobKind.placement, with_expert_share=True)
    if is_asked and still_parked:
        still_parked, unparked = None, "a person asked"
    if still_parked:
        return plan(Decision.hold, still_parked, **inputs)
    allowed = placement_allowance(policy, pool, now)
    if allowed.hold_reason is not None:
        return plan(Decision.hold, allowed.hold_reason, **inputs)
    max_moved = allowed.max_moved_slots

    history = np.stack([w.expert_tokens for w in pool.windows[-MAX_FORECAST_WINDOWS:]]).astype(np.float64)
    # aimed at the load over the time the change is expected to stay in force: under drift the next one comes
    # at the even pace (controlplane/plan/pacing.py), so a change answering the last window meets a load that has
    # moved on for most of its life
    in_force = max(policy.cooldown_seconds, HOUR / policy.max_actions_per_hour)
    window_seconds = pool.windows[-1].seconds
    load = forecast_ahead(history, max(1, round(in_force / window_seconds)) if window_seconds > 0 else 1)
    topology = pool_topology(pool)
    # the same imbalance as the measured one above, of the forecast instead of a window
    current = pool.placement.imbalance(load, topology.num_gpus)
    if current is None:
        return plan(Decision.hold, "the load forecast carries no expert load", **inputs)
    if policy.min_gain_per_moved_slot is not None and isinstance(algorithm, MigrationAware):
        # a weight copy per moved residency: under a tight moves budget, moves that barely cut a layer's hot
        # GPU spend the budget the next windows need (benchmarks/results/closed-loop-2026-11-30.md, small steps)
        algorithm = replace(algorithm, min_gain_per_move=policy.min_gain_per_moved_slot)
    step_tokens = split_step_tokens(pool, windows)
    if step_tokens is None:
        solved = algorithm.solve(load, topology, current=pool.slot_to_expert, max_moved_slots=max_moved,
                                 group_locality=policy.group_locality)
    else:  # the pool re-splits every step: place for the per-step optimum, not the window's mean
        solved = solve_for_split(algorithm, load, topology, step_tokens, current=pool.slot_to_expert,
                                 max_moved_slots=max_moved, group_locality=policy.group_locality)
        inputs["forecast_step_imbalance"] = None if solved.step_imbalance is None else round(solved.step_imbalance, 4)
    gain = current - solved.imbalance
    inputs |= {"objective": solved.objective, "forecast_imbalance_current": round(current, 4),
               "max_moved_slots": max_moved,
               "is_group_local": bool(solved.is_group_local),
               "mean_nodes_per_group": round(float(solved.mean_nodes_per_group), 3)}
    if gain < policy.min_gain or solved.num_moved_slots == 0:
        return plan(Decision.keep, f"best plan gains {gain:.3f} < min_gain {policy.min_gain}", **inputs)
    floors, context = _context(policy, pool, windows)
    # predicted in the units it will be measured in: the windows just measured, had they run the new table
    # (their sampling noise included: a few hundred tokens per GPU never measure 1.00, whatever the table)
    table = PlacementTable(solved.slot_to_expert, solved.slot_share)
    predicted = imbalance_had_it_run(table, windows, topology.num_gpus)
    assert predicted is not None  # each window's imbalance was measured above: each carries expert load
    effect = Effect("imbalance", -1, float(np.mean(measured)), predicted, policy.rollback_tolerance, floors, context)
    change = PlacementChange(solved.slot_to_expert, solved.slot_share, current,
                             solved.imbalance, solved.num_moved_slots, effect)
    if is_forced:
        why = f"requested at imbalance {measured[-1]:.3f}"
    elif is_acceptance_low:
        why = mtp.reason
    else:
        why = f"imbalance {measured[-1]:.3f} > {policy.imbalance_threshold} for {len(measured)} windows"
    return plan(Decision.rebalance, f"{why}; plan moves {solved.num_moved_slots} slots to reach "
                                    f"{solved.imbalance:.3f}", change, **inputs)


def plan_routing(policy: Policy, pool: PoolState, now: float, mtp: MtpDiagnosis | None = None) -> RoutingStep:
    """The routing limit for the pool: bounded steps on sustained all-to-all share and recall, each carrying
    its effect. There is no step while the last one awaits its verdict or while the knob is parked, and none that
    would reverse a change within the flap window. `mtp`: a routing diagnosis asks to loosen toward the model's
    own limit."""
    current = pool.topk_group
    if policy.mode == Mode.off or policy.all2all_share_target is None:
        return RoutingStep(current, "routing limits are not managed by this policy")
    if pool.num_agents == 0 or pool.num_fresh_agents < policy.min_fresh_agents_fraction * pool.num_agents:
        return RoutingStep(current, f"only {pool.num_fresh_agents}/{pool.num_agents} agents are fresh")
    last = next((c for c in reversed(pool.changes) if c.knob == KnobKind.routing), None)
    if last is not None and last.status == "applied":
        return RoutingStep(current, f"action {last.action_id} awaits its verdict")
    # judge the limit in force on windows that ran under it only
    windows = pool.routing_windows()[-policy.sustained_windows:]
    shares = [w.all2all_share for w in windows]
    recall = [pool.routing_recall(w) for w in windows]
    if len(windows) < policy.sustained_windows or any(s is None for s in shares):
        return RoutingStep(current, "not enough windows with all-to-all time")
    if pool.routing_changed_at is not None and now - pool.routing_changed_at < policy.cooldown_seconds:
        return RoutingStep(current, "cooling down")
    if sum(w.seconds for w in pool.windows) < LOAD_SPAN_SECONDS:  # a start-up's load is no baseline for a park
        return RoutingStep(current, f"under {LOAD_SPAN_SECONDS:.0f}s of windows: the load is not known yet")
    still_parked, unparked = parked_reason(pool, KnobKind.routing, with_expert_share=False)
    if still_parked:
        return RoutingStep(current, still_parked)
    limits = GroupLimits(pool.num_groups, pool.num_experts, pool.top_k, pool.model_topk_group,
                         policy.topk_group_min, policy.topk_group_max)
    if mtp is not None and mtp.cause == Cause.routing:
        _, highest = limits.range()
        groups = pool.effective_topk_group
        before = pool.signals(windows)["mtp_acceptance"] or 0.0
        step = RoutingStep(groups + 1, mtp.reason, Effect("mtp_acceptance", +1, before, policy.mtp_acceptance_floor,
                                                          RECALL_TOLERANCE)) if groups < highest else None
    else:
        step = plan_topk_group(current=current, limits=limits, all2all_share=shares,
                               recall=[r for r in recall if r is not None], target=policy.all2all_share_target,
                               recall_floor=policy.routing_recall_floor)
    step = step or RoutingStep(current, "routing limits hold")
    if not step.is_change_from(current):
        return replace(step, unparked=unparked)
    direction = 1 if (step.topk_group or pool.model_topk_group or pool.num_groups) > pool.effective_topk_group else -1
    reversed_ = next((c for c in reversed(pool.changes) if c.knob == KnobKind.routing and c.direction == -direction
                      and now - c.at < policy.flap_window_seconds), None)
    if reversed_ is not None and step.effect is not None:  # a bound enforced is never held back
        return RoutingStep(current, f"{step.reason}; held: it would reverse action {reversed_.action_id} of "
                                    f"{now - reversed_.at:.0f}s ago within the flap window "
                                    f"({policy.flap_window_seconds:.0f}s)", unparked=unparked)
    if step.effect is not None:
        floors, context = _context(policy, pool, windows)
        step = replace(step, effect=replace(step.effect, floors=step.effect.floors | floors, context=context))
    return replace(step, unparked=unparked, reason=step.reason if unparked is None
                   else f"{step.reason} (unparked: {unparked})")


def check_pool_size(policy: Policy, *, role: str, replicas: int, current: int | None, gpus_per_instance: int,
                    other_pools_gpus: int) -> PoolSizeStep:
    """Whether a pool may run `replicas` instances: within the policy's bounds for its role, and within the GPU
    budget with the GPUs the other pools use. A policy that names no bounds has `ReplicaBounds`' defaults.
    gpus_per_instance: GPUs one instance uses (its EP size)."""

    def step(is_allowed: bool, reason: str) -> PoolSizeStep:
        return PoolSizeStep(replicas, current, is_allowed, reason)

    if policy.mode == Mode.off:
        return step(False, "policy mode is off")
    bounds = policy.replicas.get(role, ReplicaBounds())
    if not bounds.min <= replicas <= bounds.max:
        return step(False, f"{replicas} replicas is outside the policy's bounds for {role}: "
                           f"min {bounds.min}, max {bounds.max}")
    gpus = replicas * gpus_per_instance + other_pools_gpus
    if policy.gpu_budget is not None and gpus > policy.gpu_budget:
        return step(False, f"{replicas} replicas x {gpus_per_instance} GPUs + {other_pools_gpus} GPUs of the other "
                           f"pools = {gpus} GPUs, over the policy's gpu_budget {policy.gpu_budget}")
    if replicas == current:
        return step(True, f"{role} already runs {replicas} replicas")
    return step(True, f"{current if current is not None else 'unsized'} -> {replicas} replicas "
                      f"({gpus} GPUs of the budget {policy.gpu_budget or 'unbounded'})")
