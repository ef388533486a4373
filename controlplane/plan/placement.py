"""The placement's planner: pure. (policy, observed pool, now) -> Plan for the pool's slot -> expert table.

The routing limit is planned in controlplane/plan/routing_limit.py, a person's pool size checked in
controlplane/plan/pool_size.py. Hysteresis lives in each. A change needs a sustained signal, fresh data from a
quorum of agents, a cooldown since the last change, room in the moves budget, and a predicted effect worth the
change. (The change carries that effect, to be verified against: controlplane/plan/effect.py.) A knob parked after
a reverted change stays put until its inputs change materially (controlplane/plan/parking.py); a knob's direction
is not reversed within the policy's flap window.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from agents.protocol.placement import PlacementTable
from controlplane.desired import Decision, Effect, KnobKind, Mode, PlacementChange, Plan, Policy
from controlplane.learn.forecast import forecast_ahead
from controlplane.observed.pool import PoolState
from controlplane.observed.window import imbalance_had_it_run
from controlplane.plan.change_cost import change_cost
from controlplane.plan.diagnose import Cause, MtpDiagnosis
from controlplane.plan.effect import change_context
from controlplane.plan.knob_plan import Given, KnobPlan, Move
from controlplane.plan.pacing import HOUR, placement_allowance
from controlplane.plan.placement_price import priced
from controlplane.plan.retry import parked_reason
from controlplane.solve.placement.algorithm import MigrationAware, PlacementAlgorithm
from controlplane.solve.placement.packing import imbalance_floor
from controlplane.solve.placement.step_split import solve_for_split
from controlplane.solve.placement.topology import Topology

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


def plan_placement(policy: Policy, pool: PoolState, now: float, *, is_forced: bool = False, is_asked: bool = False,
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
    # MTP acceptance persistently under its floor, diagnosed as load skew, asks for a rebalance
    is_acceptance_low = mtp is not None and mtp.cause == Cause.skew
    if is_acceptance_low:
        inputs["mtp_acceptance"] = mtp.evidence["mtp_acceptance"]
    if not is_forced and not is_acceptance_low and min(measured) <= policy.imbalance_threshold:
        return plan(Decision.keep, f"imbalance {measured[-1]:.3f} within threshold "
                                   f"{policy.imbalance_threshold}", **inputs)
    still_parked, unparked = parked_reason(pool, KnobKind.placement, with_expert_share=True, now=now)
    if is_asked and still_parked:
        still_parked, unparked = None, "a person asked"
    if still_parked:
        return plan(Decision.hold, still_parked, **inputs)
    allowed = placement_allowance(policy, pool, now)
    if allowed.hold_reason is not None:
        return plan(Decision.hold, allowed.hold_reason, **inputs)
    max_moved = allowed.max_moved_slots

    # the recent windows all carry load (checked above); an older one without says nothing of the mix
    history = np.stack([w.expert_tokens for w in pool.windows[-MAX_FORECAST_WINDOWS:]
                        if w.is_loaded]).astype(np.float64)
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
    floors, context = change_context(policy, pool, windows)
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


def _decide(given: Given) -> Plan:
    """The placement's plan, made only where it pays what the change costs the pool (plan/placement_price.py)."""
    inputs = given.inputs
    plan = plan_placement(given.policy, inputs.state, given.now, is_forced=inputs.is_forced,
                          is_asked=inputs.is_asked, mtp=given.mtp)
    cost = inputs.change_cost or change_cost(inputs.engine, None)
    return priced(plan, inputs.state, cost, given.policy.change_price_margin, is_asked=inputs.is_asked)


def _moves(plan: Plan, policy: Policy, state: PoolState, role: str) -> list[Move]:
    if plan.decision != Decision.rebalance:
        return []
    table = PlacementTable(plan.change.slot_to_expert, plan.change.slot_share)
    return [Move(KnobKind.placement, table, plan.reason, plan.inputs, plan.change.predicted(), plan.reason)]


def _windows_under(kind: KnobKind, version: int, state: PoolState) -> list:
    """Placement windows carry the placement they ran: a placement is judged on exactly its windows."""
    return list(state.windows_under(version))


def _against_the_table_before(effect: Effect, before: PlacementTable, after: PlacementTable, windows,
                              num_gpus: int) -> Effect | None:
    """A placement is judged on the load it met, not the load it was planned on. `before` becomes the table it
    replaced, had that run the windows measured under the change; `predicted` is the new table on the same
    windows (both from their expert load, agents/protocol/placement.py). The measured imbalance, from the slot
    counters, must then realise half of that gain, less the tolerance. A fleet that kept its old table does not.
    Neither the load's drift since the plan nor a thin window's sampling noise reads as the change's effect
    (max/mean reads higher on few tokens whatever the table). None (as planned) where the windows carry no
    expert load."""
    had_it_run = imbalance_had_it_run(before, windows, num_gpus), imbalance_had_it_run(after, windows, num_gpus)
    if had_it_run[0] is None or had_it_run[1] is None:
        return None
    return replace(effect, before=had_it_run[0], predicted=had_it_run[1])


def _effect_of_unplanned(inputs: dict, policy: Policy) -> Effect | None:
    """A placement a person or a test applied with no prediction: it must at least not be worse than the
    imbalance measured before it (by more than the tolerance), restated like any on the load it met."""
    prior = (inputs.get("measured_imbalance") or [None])[-1]
    return None if prior is None else Effect("imbalance", -1, prior, prior, policy.rollback_tolerance)


PLACEMENT_PLAN = KnobPlan(KnobKind.placement, _decide, _moves, judged_windows=_windows_under,
                          restate=_against_the_table_before, unplanned_effect=_effect_of_unplanned,
                          with_expert_share=True)
