"""Requests: what a trigger (a person's rebalance, an alert) asks of one knob of a pool.

A trigger only records its request; the pool's next reconcile handles every pending one at once and
notes on each the action it led to or joined, or why there was none. The loop's own pass is no
stored request: what it reacts to is already stored (the windows).
"""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from controlplane.store.batches import delete_some
from controlplane.store.tables import Pool, Request
from controlplane.store.timestamps import utc


def record(session: Session, *, pool: Pool, knob: str, trigger: str, created_by: str, now: float,
           alerts: list | None = None, value: dict | None = None, alert_event_id: int | None = None) -> Request:
    """value: what the trigger asks for, when it names it (a person's pool size: {"replicas": n}).
    alert_event_id: the alert event that asks (its outcome is read from its requests)."""
    request = Request(pool_id=pool.id, knob=knob, trigger=trigger, created_by=created_by, alerts=alerts or [],
                      value=value, created_at=utc(now), outcome="", alert_event_id=alert_event_id)
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
