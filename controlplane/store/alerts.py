"""Alert events: each (fingerprint, startsAt, status) is stored once, so redeliveries are no-ops."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from controlplane.store.batches import delete_some
from controlplane.store.tables import AlertEvent
from controlplane.store.timestamps import utc


def record_once(session: Session, *, fingerprint: str, starts_at: str, status: str, alertname: str,
                deployment: str | None, labels: dict, now: float) -> AlertEvent | None:
    """Returns the new event, or None when this notification was already received."""
    if session.scalar(select(AlertEvent.id).where(AlertEvent.fingerprint == fingerprint,
                                                  AlertEvent.starts_at == starts_at,
                                                  AlertEvent.status == status)) is not None:
        return None
    event = AlertEvent(fingerprint=fingerprint, starts_at=starts_at, status=status, alertname=alertname,
                       deployment=deployment, labels=labels, outcome="", received_at=utc(now))
    try:
        with session.begin_nested():  # a concurrent delivery of the same alert loses the race cleanly
            session.add(event)
    except IntegrityError:
        return None
    return event


def recent(session: Session, *, deployment: str | None, limit: int) -> list[AlertEvent]:
    query = select(AlertEvent).order_by(AlertEvent.id.desc()).limit(limit)
    if deployment is not None:
        query = query.where(AlertEvent.deployment == deployment)
    return list(session.scalars(query))


def prune(session: Session, *, before: float, limit: int) -> int:
    """Deletes events received before `before`: a redelivery of one of them is then handled as new."""
    return delete_some(session, AlertEvent, AlertEvent.received_at < utc(before), limit=limit)
