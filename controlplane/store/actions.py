"""Actions: the audit trail of decisions and what came of them."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from controlplane.store.tables import Action, Deployment, Pool
from controlplane.store.timestamps import utc

PLANNED, APPLIED, VERIFIED, ROLLED_BACK, FAILED = "planned", "applied", "verified", "rolled_back", "failed"


def record(session: Session, *, deployment: Deployment, pool: Pool | None, kind: str, trigger: str, mode: str,
           status: str, reason: str, inputs: dict, predicted: dict, created_by: str, now: float,
           placement_version: int | None = None) -> Action:
    action = Action(deployment_id=deployment.id, pool_id=pool.id if pool else None, kind=kind, trigger=trigger,
                    mode=mode, status=status, reason=reason, inputs=inputs, predicted=predicted, measured={},
                    placement_version=placement_version, created_by=created_by, created_at=utc(now),
                    updated_at=utc(now))
    session.add(action)
    session.flush()
    return action


def settle(action: Action, *, status: str, measured: dict, now: float) -> None:
    action.status, action.measured, action.updated_at = status, measured, utc(now)


def awaiting_verification(session: Session, pool: Pool) -> list[Action]:
    return list(session.scalars(select(Action).where(Action.pool_id == pool.id, Action.status == APPLIED)
                                .order_by(Action.id)))


def recent(session: Session, deployment: Deployment, *, limit: int) -> list[Action]:
    return list(session.scalars(select(Action).where(Action.deployment_id == deployment.id)
                                .order_by(Action.id.desc()).limit(limit)))


def has_recent_plan(session: Session, pool: Pool, *, since: float) -> bool:
    return session.scalar(select(Action.id).where(Action.pool_id == pool.id, Action.status == PLANNED,
                                                  Action.created_at >= utc(since)).limit(1)) is not None
