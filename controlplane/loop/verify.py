"""Settle: the first phase of a pool's pass (controlplane/loop/reconcile.py), which judges applied changes against
their intended effect and rolls back the ones that did harm, before the pass reads what it plans on.

Each change carries its effect (controlplane/plan/effect.py): the signal, the direction and the predicted
value. Once `verify_windows` windows ran under the change, the signals are measured over them and judged:
verified means the effect happened. A change that did not move its signal as intended, or that broke a
floor, is rolled back by `actuate` (the version before re-issued, or `failed` when a later change already
replaced it). Its knob is then parked for the pool with the evidence (controlplane/plan/parking.py).

Which windows a change is judged on, its effect restated on the load it met, and what a change nobody predicted must
do are its knob's planner's (`KnobPlan`, controlplane/plan/knob_plan.py, looked up by the action's kind): a
placement on exactly the windows that ran it, both tables evaluated on their expert load (plan/placement.py); a
one-number knob on the windows from its issue on (the loop never moves it again before the verdict).

A change after which MTP acceptance fell under its floor (controlplane/plan/diagnose.py, a regression) is rolled
back here too, judged on the same state, unless a verdict of this pass already rolled a change back (the evidence
then starts over).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from sqlalchemy.orm import Session

from controlplane.actuate import change
from controlplane.actuate.pool_pass import PoolPass
from controlplane.desired import Effect, Policy, VerifyOutcome
from controlplane.observed.pool import PoolState
from controlplane.observed.window import Window
from controlplane.plan.change_guard import GuardVerdict, guard_change
from controlplane.plan.diagnose import Cause, MtpDiagnosis, diagnose_mtp
from controlplane.plan.effect import judge
from controlplane.plan.knob_plan import KnobPlan, since_change
from controlplane.plan.knob_plans import KIND_TO_PLAN
from controlplane.plan.placement_price import realised_price
from controlplane.store import actions, parks
from controlplane.store.knobs import KNOBS, PLACEMENT
from controlplane.store.tables import Action, Pool

log = logging.getLogger("moectl.reconcile")


@dataclass(frozen=True)
class Settlement:
    """What the settle phase wrote: `num_settled` verdicts (verified, superseded, rolled back) and the MTP regression
    it rolled back, if it did."""

    num_settled: int = 0
    regression: MtpDiagnosis | None = None


def settle(p: PoolPass, state: PoolState) -> Settlement:
    """Judges the pool's applied changes once measured, then rolls back a change that cut MTP acceptance.
    `state`: the pool as read before any verdict; read it again when `num_settled` > 0."""
    settled = verify_pool(p.session, p.pool, state, p.policy, p.now)
    if any(a.status == actions.ROLLED_BACK for a in settled):  # what is in force moved: the MTP evidence starts over
        return Settlement(len(settled))
    mtp = diagnose_mtp(p.policy, state, p.now)
    if mtp is None or mtp.cause != Cause.regression or not roll_back_regression(p, state, mtp):
        return Settlement(len(settled))
    return Settlement(len(settled) + 1, mtp)


def roll_back_regression(p: PoolPass, state: PoolState, mtp: MtpDiagnosis) -> bool:
    """MTP acceptance fell under its floor right after a change: that change is reverted and its knob parked.
    False when the change is no longer in force (settled otherwise meanwhile)."""
    action = p.session.get(Action, mtp.action_id)
    if action is None or action.status not in (actions.APPLIED, actions.VERIFIED):
        return False
    roll_back(p.session, pool=p.pool, action=action, state=state, measured=action.measured | {"verdict": mtp.reason},
              now=p.now)
    log.info("%s/%s: rolled back action %d (%s)", p.deployment.name, p.pool.role, action.id, mtp.reason)
    return True


def verify_pool(session: Session, pool: Pool, state: PoolState, policy: Policy, now: float) -> list[Action]:
    """Settles applied changes once measured; one whose effect did not happen is rolled back and parked.
    Returns the actions settled, in order (their status says the verdict)."""
    settled: list[Action] = []
    for action in actions.awaiting_verification(session, pool):
        plan = KIND_TO_PLAN.get(action.kind)
        if plan is not None and not plan.is_judged:
            continue
        knob = KNOBS[action.kind]
        windows = (plan.judged_windows if plan else since_change)(action.kind, action.version, state)
        if windows is None:  # a later change replaced it before it could be measured
            actions.settle(action, status=actions.SUPERSEDED, measured={"verdict": "replaced before it was measured"},
                           now=now)
            settled.append(action)
            continue
        if len(windows) < policy.verify_windows:
            continue
        windows = windows[: policy.verify_windows]
        effect = Effect.from_json(action.predicted.get("effect"))
        if effect is None and plan is not None:
            effect = plan.unplanned_effect(action.inputs, policy)
        planned = {}  # the effect as planned, where the knob restates it on the load it met
        if effect is not None and plan is not None and plan.restate is not None:
            planned = {f"{effect.signal}_before_planned": round(effect.before, 4),
                       f"{effect.signal}_predicted_planned": round(effect.predicted, 4)}
            effect = _restated(session, pool, action, plan, effect, windows, state.ep_size) or effect
        signals = state.signals(windows)
        if effect is None:  # a bound enforced: nothing was predicted, what came of it is recorded
            change.settle(session, knob, pool=pool, action=action, outcome=VerifyOutcome.verified, now=now,
                          measured={k: round(v, 4) for k, v in signals.items() if v is not None}
                          | {"verdict": "a bound enforced: not judged"})
            settled.append(action)
            continue
        verdict = judge(effect, signals)
        measured = verdict.measured | planned | {f"{effect.signal}_before": round(effect.before, 4),
                                                 f"{effect.signal}_after": verdict.measured.get(effect.signal),
                                                 "verdict": verdict.reason}
        price = action.predicted.get("price")  # a priced change (a placement's, plan/placement_price.py)
        if price and "step_fixed_seconds" in price and measured.get("imbalance_after") is not None:
            # what it realised, also where a guard rolls it back: its price is judged on what it did
            measured["realised"] = realised_price(price, effect.before, measured["imbalance_after"])
        guard = _guard(action, state, windows, policy) if action.kind == PLACEMENT.kind else None
        if guard is not None:
            measured["guards"] = guard.measured
            if guard.is_breached and verdict.is_intended:
                roll_back(session, pool=pool, action=action, state=state, now=now,
                          measured=measured | {"verdict": f"guard: {guard.reason}"})
                settled.append(action)
                continue
        if verdict.is_intended:
            change.settle(session, knob, pool=pool, action=action, outcome=VerifyOutcome.verified, measured=measured,
                          now=now)
        else:
            roll_back(session, pool=pool, action=action, state=state, measured=measured, now=now)
        settled.append(action)
    return settled


def _guard(action: Action, state: PoolState, windows: list[Window], policy: Policy) -> GuardVerdict | None:
    """The placement's guards: the windows it was planned on (still in the history) against those under it."""
    planned_on = set(action.inputs.get("windows") or [])
    before = [w for w in state.windows if w.index in planned_on]
    if not before:
        return None
    return guard_change(before, windows, mtp_tolerance=policy.mtp_guard_tolerance,
                        latency_tolerance=policy.latency_guard_tolerance)


def roll_back(session: Session, *, pool: Pool, action: Action, state: PoolState, measured: dict, now: float) -> None:
    """Reverts the action's change and parks its knob with the evidence (`measured`; its `verdict` is the reason),
    at the inputs measured now. A change already replaced by a later one cannot be reverted (`failed`); its knob
    is not parked."""
    knob = KNOBS[action.kind]
    is_revertible = action.version == knob.latest_version(session, pool)
    change.settle(session, knob, pool=pool, action=action, outcome=VerifyOutcome.rolled_back, now=now,
                  measured=measured | ({"parked": True} if is_revertible else {}))
    if not is_revertible:
        return
    plan = KIND_TO_PLAN.get(knob.kind)
    parks.park(session, pool=pool, knob=knob.kind, action_id=action.id, reason=measured["verdict"], now=now,
               inputs=state.knob_inputs(with_expert_share=plan is not None and plan.with_expert_share))


def _restated(session: Session, pool: Pool, action: Action, plan: KnobPlan, effect: Effect, windows: list[Window],
              num_gpus: int) -> Effect | None:
    """The effect restated by the knob's planner on the load the change met, from the value it replaced and its
    own; None (as planned) when either value is gone (pruned) or the planner cannot restate it on `windows`."""
    knob = KNOBS[action.kind]
    try:
        before, after = knob.get(session, pool, action.version - 1), knob.get(session, pool, action.version)
    except LookupError:
        return None
    return plan.restate(effect, before, after, windows, num_gpus)
