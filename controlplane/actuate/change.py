"""The one writer of changes: a change to a knob of a pool is an action row, and once applied a new
version row of that knob naming the action. Whoever asked (the loop, a person, an alert):

1. `propose`: the policy's mode decides. Observe records a `planned` action, approve records one
   `awaiting_approval` holding the proposal, auto applies it at once.
2. `approve`/`reject`: a person decides a waiting proposal. One planned against a version that is no longer
   in force is superseded instead of applied.
3. `settle`: the verdict on an applied change. One measured worse is rolled back by issuing the version
   before it again, as a new version made by the same action.
4. `adopt`: the fleet may run a version this store never issued (its database was restored or replaced while
   the fleet ran on). What it runs becomes that version, made by an `adopted` action; nothing is sent.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Generic, TypeVar

from sqlalchemy.orm import Session

from controlplane.desired import Mode, Policy, VerifyOutcome
from controlplane.store import actions
from controlplane.store.knobs import Knob
from controlplane.store.tables import Action, Pool

V = TypeVar("V")
STATUS_BY_MODE = {Mode.observe: actions.PLANNED, Mode.approve: actions.AWAITING_APPROVAL, Mode.auto: actions.APPLIED}


@dataclass(frozen=True)
class Running(Generic[V]):
    """A knob's value a fleet reports it runs, as a version this store never issued."""

    value: V
    version: int
    reported_by: str  # the instance that reported it


def propose(session: Session, knob: Knob[V], pool: Pool, value: V, entry: actions.Entry, *, policy: Policy,
            now: float) -> Action | None:
    """Records a change to `value`; None when the policy's mode is off."""
    if policy.mode == Mode.off:
        return None
    status = STATUS_BY_MODE[policy.mode]
    action = actions.record(session, pool, entry, kind=knob.kind, mode=policy.mode.value, status=status, now=now)
    action.based_on_version = knob.latest_version(session, pool)
    if status == actions.APPLIED:
        _apply(session, knob, pool, action, value, now)
    elif status == actions.AWAITING_APPROVAL:
        knob.proposal.keep(action, value)
    return action


def approve(session: Session, knob: Knob[V], *, pool: Pool, action: Action, approved_by: str, now: float) -> None:
    """Applies a waiting proposal, unless what it changes moved on since it was planned (then superseded)."""
    value = knob.proposal.take(action)
    current = knob.latest_version(session, pool)
    if action.based_on_version != current:
        actions.settle(action, status=actions.SUPERSEDED, now=now,
                       measured={"reason": f"planned against {knob.kind} v{action.based_on_version}, "
                                           f"v{current} is applied", "approved_by": approved_by})
        return
    _apply(session, knob, pool, action, value, now)
    actions.settle(action, status=actions.APPLIED, measured={"approved_by": approved_by}, now=now)


def reject(knob: Knob[V], *, action: Action, rejected_by: str, now: float) -> None:
    knob.proposal.take(action)
    actions.settle(action, status=actions.REJECTED, measured={"rejected_by": rejected_by}, now=now)


def settle(session: Session, knob: Knob[V], *, pool: Pool, action: Action, outcome: VerifyOutcome, measured: dict,
           now: float) -> None:
    """Records the verdict on an applied change. Rolled back: the version before the action's is issued
    again; when a later change already replaced the action's version there is nothing to restore and
    the action is `failed`."""
    status = outcome.value
    if outcome == VerifyOutcome.rolled_back:
        if action.version == knob.latest_version(session, pool):
            restored = knob.get(session, pool, action.version - 1)
            measured = measured | {"restored_version": _issue(session, knob, pool, action, restored,
                                                              latest=action.version, now=now)}
        else:
            status = actions.FAILED
    actions.settle(action, status=status, measured=measured, now=now)


def adopt(session: Session, knob: Knob[V], pool: Pool, running: Running[V], *, policy: Policy, created_by: str,
          now: float) -> Action:
    """Records what the fleet runs as its version. Versions stay increasing: one at or below the latest is
    refused (ValueError); the highest a fleet reports wins, so ranks left on different versions converge on it."""
    latest, version = knob.latest_version(session, pool), running.version
    if version <= latest:
        raise ValueError(f"{knob.kind} v{version} is not newer than v{latest}: nothing to adopt")
    entry = actions.Entry(f"adopted from the fleet: {running.reported_by} runs {knob.kind} v{version}, which this "
                          f"database never issued (its latest was v{latest}): restored or replaced",
                          inputs={"reported_by": running.reported_by, "latest_before": latest}, trigger="fleet",
                          created_by=created_by)
    action = actions.record(session, pool, entry, kind=knob.kind, mode=policy.mode.value, status=actions.ADOPTED,
                            now=now)
    action.based_on_version = latest
    knob.add(session, pool, version=version, value=running.value, action_id=action.id, now=now)
    action.version = version
    return action


def _apply(session: Session, knob: Knob[V], pool: Pool, action: Action, value: V, now: float) -> None:
    """The caller holds that `action.based_on_version` is the latest."""
    action.version = _issue(session, knob, pool, action, value, latest=action.based_on_version, now=now)


def _issue(session: Session, knob: Knob[V], pool: Pool, action: Action, value: V, *, latest: int, now: float) -> int:
    """Issues `value` as the version after `latest`, which the caller read under the pool's lock; returns it."""
    version = latest + 1
    knob.add(session, pool, version=version, value=value, action_id=action.id, now=now)
    return version
