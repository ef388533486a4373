"""What the alert webhook received and did with it: for people checking that alerting is wired up."""

from __future__ import annotations

from fastapi import APIRouter, Query
from pydantic import BaseModel

from agents.protocol import NAME_PATTERN
from controlplane.api.deps import SessionDep, ViewerDep
from controlplane.store import alerts
from controlplane.store.timestamps import seconds

router = APIRouter(prefix="/v1/alerts", tags=["alerts"])


class AlertEventOut(BaseModel):
    fingerprint: str
    alertname: str
    status: str
    starts_at: str
    deployment: str | None
    outcome: str
    action_id: int | None
    received_at: float


@router.get("", response_model=list[AlertEventOut])
def list_alert_events(session: SessionDep, _: ViewerDep,
                      deployment: str | None = Query(None, max_length=63, pattern=NAME_PATTERN),
                      limit: int = Query(50, ge=1, le=1000)) -> list[AlertEventOut]:
    events = alerts.recent(session, deployment=deployment, limit=limit)
    return [AlertEventOut(fingerprint=e.fingerprint, alertname=e.alertname, status=e.status, starts_at=e.starts_at,
                          deployment=e.deployment, outcome=o.outcome, action_id=o.action_id,
                          received_at=seconds(e.received_at))
            for e, o in zip(events, alerts.outcomes(session, events), strict=True)]
