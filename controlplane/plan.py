"""The planner: pure. (policy, observed pool, now) -> Plan, and the verdict on an applied change.

Hysteresis lives here: a change needs a sustained imbalance, fresh data from a quorum of agents,
a cooldown since the last change, room in the moves budget, and a predicted gain worth the moves.
"""

from __future__ import annotations

import numpy as np

from controlplane.desired import (
    Decision,
    Mode,
    PlacementChange,
    Plan,
    Policy,
    PoolSizeStep,
    ReplicaBounds,
    VerifyOutcome,
)
from controlplane.learn.forecast import forecast_load
from controlplane.observed import PoolState
from controlplane.solve.algorithm import MigrationAware, PlacementAlgorithm
from controlplane.solve.placement import Topology
from controlplane.solve.routing import RoutingStep, plan_topk_group

HOUR = 3600.0
MAX_FORECAST_WINDOWS = 16
MIGRATION_AWARE = MigrationAware()


def pool_topology(pool: PoolState) -> Topology:
    """Nodes own consecutive ranks; an EP group smaller than a node is one node."""
    gpus_per_node = pool.gpus_per_node if pool.ep_size % pool.gpus_per_node == 0 else pool.ep_size
    return Topology(num_nodes=pool.ep_size // gpus_per_node, gpus_per_node=gpus_per_node,
                    slots_per_gpu=pool.slots_per_rank, num_groups=pool.num_groups)


def plan_pool(policy: Policy, pool: PoolState, now: float, *, is_forced: bool = False,
              algorithm: PlacementAlgorithm = MIGRATION_AWARE) -> Plan:
    """is_forced: a person or an alert asked for a rebalance; the trigger thresholds are skipped,
    the data hygiene, cooldown, budgets and the minimum gain still hold. algorithm: what solves the
    placement (solve/algorithm.py)."""

    def plan(decision: Decision, reason: str, change: PlacementChange | None = None, **inputs) -> Plan:
        return Plan(pool.deployment, pool.role, decision, reason, inputs, change)

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
    acceptance = [w.ratio("spec_accepted_tokens", "spec_draft_tokens") for w in windows]
    inputs = {"measured_imbalance": [round(m, 4) for m in measured], "windows": [w.index for w in windows],
              "placement_version": pool.placement_version}
    # the seeds' loop: acceptance persistently under its floor is read as a symptom of load skew
    is_acceptance_low = (policy.mtp_acceptance_floor is not None and len(windows) >= policy.sustained_windows
                         and all(a is not None and a < policy.mtp_acceptance_floor for a in acceptance))
    if is_acceptance_low:
        inputs["mtp_acceptance"] = [round(a, 4) for a in acceptance]
    if not is_forced and not is_acceptance_low and min(measured) <= policy.imbalance_threshold:
        return plan(Decision.keep, f"imbalance {measured[-1]:.3f} within threshold "
                                   f"{policy.imbalance_threshold}", **inputs)
    if pool.num_actions_last_hour >= policy.max_actions_per_hour:
        return plan(Decision.hold, f"{pool.num_actions_last_hour} actions in the last hour, the policy allows "
                                   f"{policy.max_actions_per_hour}", **inputs)
    if pool.last_change_at is not None and now - pool.last_change_at < policy.cooldown_seconds:
        return plan(Decision.hold, f"cooling down: last change {now - pool.last_change_at:.0f}s ago, "
                                   f"cooldown {policy.cooldown_seconds:.0f}s", **inputs)
    # budgets count expert residencies (layer, slot): weights moved, whatever the layer
    num_residencies = pool.num_layers * pool.num_slots
    max_moved = min(int(policy.max_moved_slots_fraction * num_residencies),
                    int(policy.max_moved_slots_per_hour_fraction * num_residencies) - pool.moved_slots_last_hour)
    if max_moved <= 0:
        return plan(Decision.hold, f"hourly moves budget spent ({pool.moved_slots_last_hour} slots moved)",
                    **inputs)

    history = np.stack([w.expert_tokens for w in pool.windows[-MAX_FORECAST_WINDOWS:]]).astype(np.float64)
    load = forecast_load(history)
    topology = pool_topology(pool)
    # the same imbalance as the measured one above, of the forecast instead of a window
    current = pool.placement.imbalance(load, topology.num_gpus)
    if current is None:
        return plan(Decision.hold, "the load forecast carries no expert load", **inputs)
    solved = algorithm.solve(load, topology, current=pool.slot_to_expert, max_moved_slots=max_moved,
                             group_locality=policy.group_locality)
    gain = current - solved.imbalance
    inputs |= {"forecast_imbalance_current": round(current, 4), "max_moved_slots": max_moved,
               "is_group_local": bool(solved.is_group_local),
               "mean_nodes_per_group": round(float(solved.mean_nodes_per_group), 3)}
    if gain < policy.min_gain or solved.num_moved_slots == 0:
        return plan(Decision.keep, f"best plan gains {gain:.3f} < min_gain {policy.min_gain}", **inputs)
    change = PlacementChange(solved.slot_to_expert, solved.slot_share, current,
                             solved.imbalance, solved.num_moved_slots)
    if is_forced:
        why = f"requested at imbalance {measured[-1]:.3f}"
    elif is_acceptance_low:
        why = f"MTP acceptance under {policy.mtp_acceptance_floor} for {len(windows)} windows"
    else:
        why = f"imbalance {measured[-1]:.3f} > {policy.imbalance_threshold} for {len(measured)} windows"
    return plan(Decision.rebalance, f"{why}; plan moves {solved.num_moved_slots} slots to reach "
                                    f"{solved.imbalance:.3f}", change, **inputs)


def verify_change(policy: Policy, pool: PoolState, version: int, prior_imbalance: float
                  ) -> tuple[VerifyOutcome, float | None]:
    """Judges an applied placement once `verify_windows` complete windows ran under it.

    Returns the outcome and the measured imbalance (mean over those windows).
    """
    windows = [w for w in pool.windows if w.placement_version == version and w.num_slot_reports == w.num_reports]
    if len(windows) < policy.verify_windows:
        return VerifyOutcome.wait, None
    values = [w.imbalance(pool.ep_size) for w in windows[: policy.verify_windows]]
    values = [v for v in values if v is not None]
    if not values:
        return VerifyOutcome.wait, None
    measured = float(np.mean(values))
    if measured > prior_imbalance + policy.rollback_tolerance:
        return VerifyOutcome.rolled_back, measured
    return VerifyOutcome.verified, measured


def plan_routing(policy: Policy, pool: PoolState, now: float) -> RoutingStep:
    """The routing limit for the pool: bounded steps on sustained all-to-all share and recall."""
    current = pool.topk_group
    if policy.mode == Mode.off or policy.all2all_share_target is None:
        return RoutingStep(current, "routing limits are not managed by this policy")
    if pool.num_agents == 0 or pool.num_fresh_agents < policy.min_fresh_agents_fraction * pool.num_agents:
        return RoutingStep(current, f"only {pool.num_fresh_agents}/{pool.num_agents} agents are fresh")
    # judge the limit in force on windows that ran under it only
    since = pool.routing_changed_at or 0.0
    windows = [w for w in pool.windows if w.start >= since][-policy.sustained_windows:]
    shares = [w.all2all_share for w in windows]
    recall = [w.ratio("routing_recall_sum", "routing_recall_count") for w in windows]
    if len(windows) < policy.sustained_windows or any(s is None for s in shares):
        return RoutingStep(current, "not enough windows with all-to-all time")
    if pool.routing_changed_at is not None and now - pool.routing_changed_at < policy.cooldown_seconds:
        return RoutingStep(current, "cooling down")
    return plan_topk_group(current=current, default=pool.model_topk_group, num_groups=pool.num_groups,
                           num_experts=pool.num_experts, top_k=pool.top_k, all2all_share=shares,
                           recall=[r for r in recall if r is not None], target=policy.all2all_share_target,
                           recall_floor=policy.routing_recall_floor, min_groups=policy.topk_group_min,
                           max_groups=policy.topk_group_max)


def diagnose_prefix_hits(policy: Policy, pool: PoolState) -> tuple[str, list[float]] | None:
    """A finding when the prefix-cache hit ratio stays under the policy's floor. Nothing in the
    placement fixes it (requests miss the instances holding their prefixes, or the cache thrashes),
    so the loop records it for people instead of acting. Returns the finding and the ratios it read."""
    if policy.mode == Mode.off or policy.prefix_hit_floor is None:
        return None
    windows = pool.windows[-policy.sustained_windows:]
    ratios = [w.ratio("prefix_hit_tokens", "prefix_query_tokens") for w in windows]
    if len(windows) < policy.sustained_windows or any(r is None or r >= policy.prefix_hit_floor for r in ratios):
        return None
    finding = (f"prefix hit ratio {ratios[-1]:.2f} under floor {policy.prefix_hit_floor} for {len(ratios)} windows: "
               f"check the router's prefix affinity and the KV cache's size (no placement change helps)")
    return finding, ratios


def check_pool_size(policy: Policy, *, role: str, replicas: int, current: int | None, gpus_per_instance: int,
                    other_pools_gpus: int) -> PoolSizeStep:
    """Whether a pool may run `replicas` instances: within the policy's bounds for its role (the defaults of
    `ReplicaBounds` when the policy names none) and, with the GPUs the other pools use, within the GPU budget.
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
