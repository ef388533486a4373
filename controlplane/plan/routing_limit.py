"""The routing limit's planner: pure. (policy, observed pool, now) -> a step for the pool's `topk_group`.

Bounded steps on the sustained all-to-all share and routing recall (controlplane/solve/routing.py), each carrying
its effect to be verified against (controlplane/plan/effect.py). Judged on the windows since the limit's last
change only; a parked limit stays put until its inputs change materially (controlplane/plan/parking.py), and a
step never reverses a change within the policy's flap window.
"""

from __future__ import annotations

from dataclasses import replace

from controlplane.desired import Decision, Effect, KnobKind, Mode, Policy
from controlplane.observed.pool import LOAD_SPAN_SECONDS, PoolState
from controlplane.plan.diagnose import Cause, MtpDiagnosis
from controlplane.plan.effect import change_context
from controlplane.plan.holds import held_reason, not_ready, reversed_change
from controlplane.plan.knob_plan import Given, KnobPlan, Move
from controlplane.plan.retry import parked_reason
from controlplane.solve.routing import RECALL_TOLERANCE, GroupLimits, RoutingStep, plan_topk_group


def plan_routing(policy: Policy, pool: PoolState, now: float, mtp: MtpDiagnosis | None = None) -> RoutingStep:
    """The routing limit for the pool: bounded steps on sustained all-to-all share and recall, each carrying
    its effect. There is no step while the last one awaits its verdict or while the knob is parked, and none that
    would reverse a change within the flap window. `mtp`: a routing diagnosis asks to loosen toward the model's
    own limit."""
    current = pool.topk_group
    if policy.mode == Mode.off or policy.all2all_share_target is None:
        return RoutingStep(current, "routing limits are not managed by this policy")
    why = not_ready(policy, pool, KnobKind.routing)
    if why is not None:
        return RoutingStep(current, why)
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
    still_parked, unparked = parked_reason(pool, KnobKind.routing, with_expert_share=False, now=now)
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
    reversed_ = reversed_change(policy, pool, KnobKind.routing, direction, now)
    if reversed_ is not None and step.effect is not None:  # a bound enforced is never held back
        return RoutingStep(current, held_reason(policy, step.reason, reversed_, now), unparked=unparked)
    if step.effect is not None:
        floors, context = change_context(policy, pool, windows)
        step = replace(step, effect=replace(step.effect, floors=step.effect.floors | floors, context=context))
    return replace(step, unparked=unparked, reason=step.reason if unparked is None
                   else f"{step.reason} (unparked: {unparked})")


def _decide(given: Given) -> RoutingStep | None:
    """None while the placement moves this pass (one change of the pool's imbalance per pass)."""
    if given.earlier[KnobKind.placement].decision == Decision.rebalance:
        return None
    return plan_routing(given.policy, given.inputs.state, given.now, given.mtp)


def _moves(step: RoutingStep | None, policy: Policy, state: PoolState, role: str) -> list[Move]:
    """The group limit `step` moves to, with the windows it judged the one in force on."""
    if step is None or not step.is_change_from(state.topk_group):
        return []
    windows_used = state.routing_windows()[-policy.sustained_windows:]
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
    return [Move(KnobKind.routing, step.topk_group, step.reason, inputs, predicted,
                 f"routing {state.topk_group} -> {step.topk_group} ({step.reason})")]


# judged on the windows from the limit's issue on (the default): the loop never moves it again before the verdict
ROUTING_PLAN = KnobPlan(KnobKind.routing, _decide, _moves)
