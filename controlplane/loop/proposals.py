"""What a pool's decisions ask to change, knob by knob, as the action rows will record it. Pure: the decisions
(controlplane/plan/decisions.py) and the state they were made on in, one `Proposal` per knob that moves out.
`Reconciler.pool` (controlplane/loop/reconcile.py) writes them in one loop, each through `actuate.change`."""

from __future__ import annotations

from dataclasses import dataclass

from agents.protocol.placement import PlacementTable
from controlplane.desired import Decision, KnobKind, Policy
from controlplane.observed.pool import PoolState
from controlplane.plan.capacity_factor import CapacityStep
from controlplane.plan.decisions import Decisions
from controlplane.plan.pools_outcome import finite
from controlplane.solve.routing import RoutingStep
from controlplane.store import prefill_thresholds, tokens
from controlplane.store.actions import Entry
from controlplane.store.tables import Request


@dataclass(frozen=True)
class Proposal:
    kind: KnobKind
    value: object  # the knob's new value: a PlacementTable, a group limit, replicas, tokens
    entry: Entry  # why, on what, predicting what, for whom
    summary: str  # the log line: the knob's move in words


def proposals(decisions: Decisions, policy: Policy, state: PoolState, role: str,
              pending: list[Request]) -> list[Proposal]:
    """pending: the placement requests this pass answers; the first one's trigger and author go on the action,
    all their alerts."""
    out = []
    plan = decisions.placement
    if plan.decision == Decision.rebalance:
        trigger, created_by = (pending[0].trigger, pending[0].created_by) if pending else ("loop", tokens.LOOP)
        alerts = [alert for request in pending for alert in request.alerts]
        table = PlacementTable(plan.change.slot_to_expert, plan.change.slot_share)
        out.append(Proposal(KnobKind.placement, table, Entry(plan.reason, plan.inputs, plan.change.predicted(),
                                                             trigger, created_by, alerts), plan.reason))
    step = decisions.routing
    if step is not None and step.is_change_from(state.topk_group):
        out.append(_routing(step, state, policy.sustained_windows))
    cap = decisions.capacity
    if cap is not None and cap.is_change_from(state.knob(KnobKind.expert_capacity).value):
        out.append(_capacity(cap, state, policy.sustained_windows))
    if decisions.pools is None:
        return out
    outcome = decisions.pools
    d = outcome.plan.decision(role)
    if d.direction:
        pool = {k: v for k, v in outcome.summary["pools"][role].items() if k != "decision"}
        inputs = {"kind": d.kind.value, "request_rate": finite(d.request_rate),
                  "measured": outcome.summary["measured"], "load": outcome.summary["load"], "pool": pool}
        predicted = finite({"replicas_before": d.current, "replicas_after": d.target} | d.predicted_dict())
        out.append(Proposal(KnobKind.pool_size, d.target, Entry(f"{d.kind.value}: {d.reason}", inputs, predicted),
                            f"{d.current} -> {d.target} replicas ({d.kind.value}: {d.reason})"))
    t = outcome.plan.threshold
    if role == prefill_thresholds.ROLE and t is not None and t.direction:
        entry = Entry(t.reason, finite(dict(t.measured)), {"tokens_before": t.current, "tokens_after": t.target})
        out.append(Proposal(KnobKind.local_prefill_threshold, t.target, entry,
                            f"local-prefill threshold {t.current} -> {t.target} tokens ({t.reason})"))
    return out


def _routing(step: RoutingStep, state: PoolState, num_windows: int) -> Proposal:
    """The group limit `step` moves to, with the windows it judged the one in force on."""
    windows_used = state.routing_windows()[-num_windows:]
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
    return Proposal(KnobKind.routing, step.topk_group, Entry(step.reason, inputs, predicted),
                    f"routing {state.topk_group} -> {step.topk_group} ({step.reason})")


def _capacity(step: CapacityStep, state: PoolState, num_windows: int) -> Proposal:
    """The cap `step` moves to, with the windows it was decided on."""
    current = state.knob(KnobKind.expert_capacity).value
    windows_used = state.windows_since_change(KnobKind.expert_capacity)[-num_windows:]
    signals = state.signals(windows_used)
    inputs = {"windows": [w.index for w in windows_used], "expert_capacity_factor": current,
              "measured_imbalance": [round(w.imbalance(state.ep_size) or 0.0, 4) for w in windows_used],
              "dropped_share": None if signals["dropped_share"] is None else round(signals["dropped_share"], 6)}
    predicted = {"factor_before": current, "factor_after": step.factor}
    if step.effect is not None:
        predicted["effect"] = step.effect.to_json()
    return Proposal(KnobKind.expert_capacity, step.factor, Entry(step.reason, inputs, predicted),
                    f"capacity factor {current or 'none'} -> {step.factor or 'none'} ({step.reason})")
