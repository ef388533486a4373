"""Requests: what a trigger (a person's rebalance, an alert) asks of one knob of a pool.

A trigger only records its request; the pool's next reconcile handles every pending one at once and
notes on each the action it led to or joined, or why there was none. The loop's own pass is no
stored request: what it reacts to is already stored (the windows).
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.orm import Session

from controlplane.store.batches import delete_some
from controlplane.store.tables import Pool, Request
from controlplane.store.timestamps import utc


@dataclass(frozen=True)
class Ask:
    """What a trigger asks of one knob of a pool."""

    knob: str
    trigger: str  # manual, alert
    created_by: str  # recorded in the audit trail
    value: dict | None = None  # what it asks for, when it names it (a person's pool size: {"replicas": n})
    alerts: tuple[dict, ...] = ()  # the alerts that ask, as the action lists them
    alert_event_id: int | None = None  # the alert event that asks (its outcome is read from its requests)


def record(session: Session, pool: Pool, ask: Ask, *, now: float) -> Request:
    request = Request(pool_id=pool.id, knob=ask.knob, trigger=ask.trigger, created_by=ask.created_by,
                      alerts=list(ask.alerts), value=ask.value, created_at=utc(now), outcome="",
                      alert_event_id=ask.alert_event_id)
    session.add(request)
    session.flush()
    return request


def pending(session: Session, pool: Pool, *, knob: str | None = None) -> list[Request]:
    """Unhandled requests for the pool's knob (None: every knob's), oldest first."""
    query = select(Request).where(Request.pool_id == pool.id, Request.handled_at.is_(None))
    if knob is not None:
        query = query.where(Request.knob == knob)
    return list(session.scalars(query.order_by(Request.id)))


def settle(request: Request, *, outcome: str, action_id: int | None, now: float) -> None:
    request.outcome, request.action_id, request.handled_at = outcome, action_id, utc(now)


def prune(session: Session, *, before: float, limit: int) -> int:
    """Deletes requests handled before `before` (pending ones stay, whatever their age)."""
    return delete_some(session, Request, Request.handled_at.is_not(None), Request.handled_at < utc(before),
                       limit=limit)
