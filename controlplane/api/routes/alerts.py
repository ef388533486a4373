"""Alertmanager webhook (payload version 4): alerts that ask for a rebalance trigger one.

Delivery is at-least-once and alerts come in storms. So each (fingerprint, startsAt, status) is
handled once. Each alert that asks for a rebalance records a request on its pools, and each pool is
then reconciled once (`controlplane.loop.reconcile`, on the replica that leads; elsewhere the leader's next
pass does). Its alerts join one action, or the one in flight. The policy's mode and cooldowns apply as
for the loop.

Each alert is handled in a transaction of its own (its event and its requests), so one bad alert never
blocks its group. One that cannot be stored as sent (too long for its column, a NUL byte, a deployment
label that is no deployment name) is recorded as rejected, with why. An alert is a duplicate only once
its handling committed; a retry of one whose reconcile failed reconciles its pools again. When the
database itself fails the delivery is answered 503, and Alertmanager's retry finds what was stored.
"""

from __future__ import annotations

import hashlib
import json
import re

from fastapi import APIRouter, HTTPException
from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy.exc import DBAPIError, IntegrityError
from sqlalchemy.orm import Session

from agents.protocol import NAME_PATTERN
from controlplane.api.deps import ActuationDep, AlertsDep, NowDep, SessionsDep, SettingsDep
from controlplane.desired import KnobKind, Mode
from controlplane.store import alerts, deployments, policies, requests
from controlplane.store.db import is_unavailable
from controlplane.store.tables import AlertEvent, Deployment, Pool

router = APIRouter(prefix="/v1/alerts", tags=["alerts"])
REBALANCE = "rebalance"
ACTION_LABEL = "moectl_action"


class AlertIn(BaseModel):
    model_config = ConfigDict(extra="allow")
    status: str = Field(pattern="^(firing|resolved)$")
    labels: dict[str, str]
    annotations: dict[str, str] = {}
    startsAt: str
    endsAt: str | None = None
    generatorURL: str = ""
    fingerprint: str = ""


class WebhookIn(BaseModel):
    model_config = ConfigDict(extra="allow")
    version: str
    status: str = ""
    receiver: str = ""
    groupKey: str = ""
    alerts: list[AlertIn]


def _fingerprint(alert: AlertIn) -> str:
    return alert.fingerprint or hashlib.sha256(json.dumps(alert.labels, sort_keys=True).encode()).hexdigest()[:16]


@router.post("/alertmanager")
def alertmanager(body: WebhookIn, sessions: SessionsDep, settings: SettingsDep, now: NowDep, actuation: ActuationDep,
                 caller: AlertsDep) -> dict:
    if body.version != "4":
        raise HTTPException(422, f"Alertmanager webhook payload version {body.version!r} is not supported; "
                                 f"this endpoint reads version '4'")
    handled: list[int] = []  # events handled by this delivery, in order
    pool_ids: dict[int, None] = {}  # pools with requests to reconcile, in order
    num_duplicates = 0
    for alert in body.alerts:
        event_id, is_new, pending = _handle(sessions, settings, alert, now, caller.name)
        num_duplicates += not is_new
        if is_new or pending:  # a retry of an alert whose reconcile failed is handled now
            handled.append(event_id)
        pool_ids.update(dict.fromkeys(pending))
    for pool_id in pool_ids:
        with sessions() as session, session.begin():
            pool = session.get(Pool, pool_id)
            actuation.reconcile_requested(session, session.get(Deployment, pool.deployment_id), pool, now=now)
    with sessions() as session:
        events = [session.get(AlertEvent, event_id) for event_id in handled]
        outcomes = [{"fingerprint": o.fingerprint, "alertname": o.alertname, "outcome": o.outcome,
                     "action_id": o.action_id} for o in alerts.outcomes(session, events)]
    return {"received": len(body.alerts), "duplicates": num_duplicates,
            "actions": sorted({o["action_id"] for o in outcomes if o["action_id"]}), "outcomes": outcomes}


def _handle(sessions, settings, alert: AlertIn, now: float, caller: str) -> tuple[int, bool, list[int]]:
    """Stores one alert and its requests in one transaction. Returns (its event's id, whether it is new,
    the pools with its requests still pending)."""
    received = alerts.Received(_fingerprint(alert), alert.startsAt, alert.status, alert.labels.get("alertname", ""),
                               alert.labels)
    label = settings.alert_deployment_label
    name = alert.labels.get(label)
    problems = alerts.misfits(received)
    if name is not None and not re.fullmatch(NAME_PATTERN, name):
        problems.append(f"label {label!r} is {_quoted(name)}, not a deployment name "
                        f"(a DNS label: lowercase letters, digits and '-', at most 63)")
    try:
        with sessions() as session, session.begin():
            return _store(session, settings, received, None if problems else name, now, caller,
                          rejected="; ".join(problems))
    except IntegrityError:  # the same alert, delivered concurrently, committed first: a duplicate
        with sessions() as session:
            event = alerts.find(session, received)
            if event is None:
                raise
            return event.id, False, alerts.pending_pools(session, event)
    except DBAPIError as exc:
        if is_unavailable(exc):  # the database is busy or gone: the delivery is answered 503 and retried
            raise
        # refused for a reason the checks above missed: recorded, never blocking the group
        reason = f"the database refused it ({type(exc.orig).__name__})"
        with sessions() as session, session.begin():
            return _store(session, settings, received, None, now, caller, rejected=reason)


def _store(session: Session, settings, alert: alerts.Received, name: str | None, now: float, caller: str, *,
           rejected: str) -> tuple[int, bool, list[int]]:
    existing = alerts.find(session, alert)
    if existing is not None:
        return existing.id, False, alerts.pending_pools(session, existing)
    event = alerts.record(session, alert, deployment=name, outcome=f"rejected: {rejected}" if rejected else "",
                          now=now)
    if rejected:
        return event.id, True, []
    event.outcome, pool_ids = _request(session, settings, alert, event, name, now, caller)
    return event.id, True, pool_ids


def _request(session: Session, settings, alert: alerts.Received, event: AlertEvent, name: str | None, now: float,
             caller: str) -> tuple[str, list[int]]:
    """Records a rebalance request on each pool the alert names; else says why the alert asks nothing."""
    if name is None:
        return f"no '{settings.alert_deployment_label}' label: not mapped to a deployment", []
    deployment = deployments.get(session, name)
    if deployment is None:
        return f"deployment {name!r} is not registered", []
    if alert.status == "resolved":
        return "resolved", []
    if alert.labels.get(ACTION_LABEL) != REBALANCE:
        return f"recorded; no '{ACTION_LABEL}: {REBALANCE}' label, so no action", []
    _, policy = policies.active(session, deployment)
    if policy.mode == Mode.off:
        return "policy mode is off", []
    role = alert.labels.get("role")
    note = {"fingerprint": event.fingerprint, "alertname": event.alertname, "startsAt": event.starts_at}
    ask = requests.Ask(KnobKind.placement, "alert", caller, alerts=(note,), alert_event_id=event.id)
    recorded = [requests.record(session, pool, ask, now=now)
                for pool in deployments.pools_of(session, deployment) if role in (None, pool.role)]
    if not recorded:
        return f"deployment {name!r} has no pool {role!r}", []
    return "", [r.pool_id for r in recorded]


def _quoted(value: str, limit: int = 80) -> str:
    shown = repr(value)
    return shown if len(shown) <= limit else shown[:limit - 4] + "...'"
