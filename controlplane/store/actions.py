"""Actions: the audit trail of decisions and what came of them."""

from __future__ import annotations

from dataclasses import dataclass, field

from sqlalchemy import func, select, update
from sqlalchemy.orm import Session

from controlplane.desired import KnobKind
from controlplane.store.batches import delete_some
from controlplane.store.tables import Action, Deployment, Pool
from controlplane.store.timestamps import utc

PLANNED, AWAITING_APPROVAL, APPLIED = "planned", "awaiting_approval", "applied"
VERIFIED, ROLLED_BACK, FAILED, REJECTED = "verified", "rolled_back", "failed", "rejected"
SUPERSEDED = "superseded"  # what it changes had moved on (a newer version) when it was approved
RECORDED = "recorded"  # a finding for people: nothing to apply
CONFLICT = "conflict"  # another writer sets what the knob changes: moectl stands down until a person resumes
RESUMED = "resumed"  # a person resumed moectl after a conflict
ADOPTED = "adopted"  # what the fleet ran under a version the store had lost, recorded as that version
OPEN = (AWAITING_APPROVAL, APPLIED, CONFLICT)  # a person or the verifier still has to settle these


@dataclass(frozen=True)
class Entry:
    """What the audit trail says of an action when it is made: why, on what evidence, what it should do, and
    who asked."""

    reason: str
    inputs: dict = field(default_factory=dict)  # what the decision read
    predicted: dict = field(default_factory=dict)  # what it should do, checked when verified
    trigger: str = "loop"  # loop, manual, alert, fleet
    created_by: str = "loop"  # the asking token's name (store/tokens.py; the loop's is LOOP)
    alerts: list = field(default_factory=list)  # the alerts that asked, when an alert did


def record(session: Session, pool: Pool, entry: Entry, *, kind: str, mode: str, status: str, now: float) -> Action:
    action = Action(deployment_id=pool.deployment_id, pool_id=pool.id, kind=kind, trigger=entry.trigger, mode=mode,
                    status=status, reason=entry.reason, inputs=entry.inputs, predicted=entry.predicted, measured={},
                    alerts=list(entry.alerts), created_by=entry.created_by, created_at=utc(now), updated_at=utc(now))
    session.add(action)
    session.flush()
    return action


def settle(action: Action, *, status: str, measured: dict, now: float) -> None:
    action.status, action.measured, action.updated_at = status, measured, utc(now)


def awaiting_verification(session: Session, pool: Pool) -> list[Action]:
    return list(session.scalars(select(Action).where(Action.pool_id == pool.id, Action.status == APPLIED)
                                .order_by(Action.id)))


def get(session: Session, action_id: int) -> Action | None:
    return session.get(Action, action_id)


def claim_waiting(session: Session, action: Action, *, now: float) -> bool:
    """Compare-and-set: True for the one caller that finds the action still awaiting approval (its
    decision is then written in this transaction); False for everyone who comes after it committed."""
    claimed = session.execute(update(Action).where(Action.id == action.id, Action.status == AWAITING_APPROVAL)
                              .values(updated_at=utc(now))).rowcount == 1
    session.refresh(action)  # as committed by whoever decided first, or as we now hold it
    return claimed


def recent(session: Session, deployment: Deployment, *, limit: int) -> list[Action]:
    return list(session.scalars(select(Action).where(Action.deployment_id == deployment.id)
                                .order_by(Action.id.desc()).limit(limit)))


def count_since(session: Session, pool: Pool, *, since: float, statuses: tuple[str, ...]) -> int:
    return session.scalar(select(func.count()).where(Action.pool_id == pool.id, Action.kind == KnobKind.placement,
                                                     Action.status.in_(statuses), Action.created_at >= utc(since))) or 0


def of_pool(session: Session, pool: Pool, *, since: float, statuses: tuple[str, ...]) -> list[Action]:
    """The pool's actions in one of `statuses` created since `since`, newest first."""
    return list(session.scalars(select(Action).where(Action.pool_id == pool.id, Action.status.in_(statuses),
                                                     Action.created_at >= utc(since)).order_by(Action.id.desc())))


def open_for(session: Session, pool: Pool, *, since: float, kind: str, statuses: tuple[str, ...]) -> Action | None:
    """The newest action of `kind` in one of `statuses` created since `since`."""
    return session.scalar(select(Action).where(Action.pool_id == pool.id, Action.kind == kind,
                                               Action.status.in_(statuses), Action.created_at >= utc(since))
                          .order_by(Action.id.desc()).limit(1))


def versions_in_use(session: Session, pool: Pool, kind: str) -> set[int]:
    """Versions of a knob open actions still need: an applied change's version and the one before it (a
    rollback issues it again), and the version a waiting proposal was planned against."""
    rows = session.execute(select(Action.status, Action.version, Action.based_on_version)
                           .where(Action.pool_id == pool.id, Action.kind == kind, Action.status.in_(OPEN)))
    in_use: set[int] = set()
    for status, version, based_on in rows:
        if status == APPLIED and version is not None:
            in_use |= {version, version - 1}
        elif status == AWAITING_APPROVAL and based_on is not None:
            in_use.add(based_on)
    return in_use


def prune(session: Session, *, before: float, keep: set[int], limit: int) -> int:
    """Deletes settled actions last updated before `before`, except open ones, the newest of each pool and
    kind (what `in_flight` and the views read) and those in `keep`. Returns how many went."""
    newest = select(func.max(Action.id)).group_by(Action.pool_id, Action.kind)
    return delete_some(session, Action, Action.status.not_in(OPEN), Action.updated_at < utc(before),
                       Action.id.not_in(newest), Action.id.not_in(keep), limit=limit)
