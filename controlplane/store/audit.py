"""Audit events: admin removals, recorded apart from what they removed (a deployment's actions go with it)."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from controlplane.store.batches import delete_some
from controlplane.store.tables import AuditEvent
from controlplane.store.timestamps import utc


def record(session: Session, *, verb: str, deployment: str, detail: dict, created_by: str, now: float) -> AuditEvent:
    event = AuditEvent(verb=verb, deployment=deployment, detail=detail, created_by=created_by, created_at=utc(now))
    session.add(event)
    session.flush()
    return event


def recent(session: Session, *, deployment: str | None, limit: int) -> list[AuditEvent]:
    query = select(AuditEvent).order_by(AuditEvent.id.desc()).limit(limit)
    if deployment is not None:
        query = query.where(AuditEvent.deployment == deployment)
    return list(session.scalars(query))


def prune(session: Session, *, before: float, limit: int) -> int:
    return delete_some(session, AuditEvent, AuditEvent.created_at < utc(before), limit=limit)
