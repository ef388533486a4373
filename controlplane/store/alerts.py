"""Alert events: each (fingerprint, startsAt, status) is stored once, so redeliveries are no-ops.

An event is stored in the same transaction as what the alert asked for (its requests), so it counts as
a duplicate only once its handling committed. Whatever Alertmanager sends is kept, fitted to the columns.
A key too long for its column, or holding a NUL byte (PostgreSQL's text refuses it), is stored as its SHA-256;
names are escaped and cut. `misfits` says what did not fit, for the alert to be rejected.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

from sqlalchemy import select
from sqlalchemy.orm import Session

from controlplane.store.batches import delete_some
from controlplane.store.tables import AlertEvent, Request
from controlplane.store.timestamps import utc

FINGERPRINT_CHARS = AlertEvent.__table__.c.fingerprint.type.length
STARTS_AT_CHARS = AlertEvent.__table__.c.starts_at.type.length
ALERTNAME_CHARS = AlertEvent.__table__.c.alertname.type.length
PENDING = "requested; the pool's next reconcile handles it"


@dataclass(frozen=True)
class Outcome:
    """What came of an alert: its requests' outcomes (or why it asked nothing) and the action it led to."""

    fingerprint: str
    alertname: str
    outcome: str
    action_id: int | None


@dataclass(frozen=True)
class Received:
    """One alert as Alertmanager sent it: its key (fingerprint, startsAt, status) and what it says."""

    fingerprint: str
    starts_at: str
    status: str  # firing, resolved
    alertname: str = ""
    labels: dict[str, str] = field(default_factory=dict)


def misfits(alert: Received) -> list[str]:
    """What of an alert cannot be stored as sent, each naming the field."""
    problems = []
    for name, value, limit in (("fingerprint", alert.fingerprint, FINGERPRINT_CHARS),
                               ("startsAt", alert.starts_at, STARTS_AT_CHARS),
                               ("alertname", alert.alertname, ALERTNAME_CHARS)):
        if len(value) > limit:
            problems.append(f"{name} is {len(value)} characters, at most {limit} are kept")
        if "\x00" in value:
            problems.append(f"{name} holds a NUL byte")
    return problems


def find(session: Session, alert: Received) -> AlertEvent | None:
    return session.scalar(select(AlertEvent).where(
        AlertEvent.fingerprint == _key(alert.fingerprint, FINGERPRINT_CHARS),
        AlertEvent.starts_at == _key(alert.starts_at, STARTS_AT_CHARS), AlertEvent.status == alert.status))


def record(session: Session, alert: Received, *, deployment: str | None, outcome: str, now: float) -> AlertEvent:
    """Stores a new event (flushed: a concurrent delivery of the same alert is an IntegrityError here).
    deployment: the deployment it names (None: none, or not a deployment name)."""
    event = AlertEvent(fingerprint=_key(alert.fingerprint, FINGERPRINT_CHARS),
                       starts_at=_key(alert.starts_at, STARTS_AT_CHARS), status=alert.status,
                       alertname=_text(alert.alertname, ALERTNAME_CHARS), deployment=deployment, labels=alert.labels,
                       outcome=outcome, received_at=utc(now))
    session.add(event)
    session.flush()
    return event


def pending_pools(session: Session, event: AlertEvent) -> list[int]:
    """Pools with requests of this event not yet handled (its delivery failed after it was stored)."""
    return list(session.scalars(select(Request.pool_id).where(Request.alert_event_id == event.id,
                                                              Request.handled_at.is_(None)).distinct()))


def outcomes(session: Session, events: list[AlertEvent]) -> list[Outcome]:
    """Each event's outcome, in order: read from its requests when it made any (they are settled by
    whichever reconcile handles them: the delivery's own, a retry's or the loop's)."""
    by_event: dict[int, list[Request]] = {}
    for request in session.scalars(select(Request).where(Request.alert_event_id.in_([e.id for e in events]))
                                   .order_by(Request.id)):
        by_event.setdefault(request.alert_event_id, []).append(request)
    out = []
    for event in events:
        asked = by_event.get(event.id)
        if not asked:
            out.append(Outcome(event.fingerprint, event.alertname, event.outcome, event.action_id))
            continue
        outcome = "; ".join(r.outcome or PENDING for r in asked)
        out.append(Outcome(event.fingerprint, event.alertname, outcome,
                           next((r.action_id for r in asked if r.action_id), None)))
    return out


def recent(session: Session, *, deployment: str | None, limit: int) -> list[AlertEvent]:
    query = select(AlertEvent).order_by(AlertEvent.id.desc()).limit(limit)
    if deployment is not None:
        query = query.where(AlertEvent.deployment == deployment)
    return list(session.scalars(query))


def prune(session: Session, *, before: float, limit: int) -> int:
    """Deletes events received before `before`: a redelivery of one of them is then handled as new."""
    return delete_some(session, AlertEvent, AlertEvent.received_at < utc(before), limit=limit)


def _key(value: str, limit: int) -> str:
    """A dedupe key as sent, or its SHA-256 when it does not fit (still one key per value sent)."""
    if len(value) <= limit and "\x00" not in value:
        return value
    return hashlib.sha256(value.encode("utf-8", "surrogatepass")).hexdigest()[:limit]


def _text(value: str, limit: int) -> str:
    """A name for people to read: NUL bytes shown as \\0, cut to the column with an ellipsis."""
    value = value.replace("\x00", "\\0")
    return value if len(value) <= limit else value[:limit - 1] + "…"
