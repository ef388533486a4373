"""Alertmanager webhook (payload version 4): alerts that ask for a rebalance trigger one.

Delivery is at-least-once and alerts come in storms, so: each (fingerprint, startsAt, status) is
handled once; each alert that asks for a rebalance records a request on its pools, and each pool is
then reconciled once (`controlplane.reconcile`): its alerts join one action, or the one in flight.
The policy's mode and cooldowns apply as for the loop.
"""

from __future__ import annotations

import hashlib
import json

from fastapi import APIRouter, HTTPException
from pydantic import BaseModel, ConfigDict, Field

from controlplane.actuate.placement import PLACEMENT
from controlplane.api.actuation import FOR_THE_LEADER
from controlplane.api.deps import ActuationDep, AlertsDep, NowDep, SessionDep, SettingsDep
from controlplane.desired import Mode
from controlplane.store import alerts, deployments, policies, requests
from controlplane.store.tables import AlertEvent, Deployment, Pool, Request

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
def alertmanager(body: WebhookIn, session: SessionDep, settings: SettingsDep, now: NowDep, actuation: ActuationDep,
                 caller: AlertsDep) -> dict:
    if body.version != "4":
        raise HTTPException(422, f"Alertmanager webhook payload version {body.version!r} is not supported; "
                                 f"this endpoint reads version '4'")
    asked: list[tuple[AlertEvent, list[Request]]] = []
    num_duplicates = 0
    with session.begin():
        for alert in body.alerts:
            fingerprint = _fingerprint(alert)
            name = alert.labels.get(settings.alert_deployment_label)
            event = alerts.record_once(session, fingerprint=fingerprint, starts_at=alert.startsAt,
                                       status=alert.status, alertname=alert.labels.get("alertname", ""),
                                       deployment=name, labels=alert.labels, now=now)
            if event is None:
                num_duplicates += 1
                continue
            event.outcome, recorded = _request(session, settings, alert, fingerprint, name, now, caller.name)
            asked.append((event, recorded))
        pool_ids = list(dict.fromkeys(r.pool_id for _, recorded in asked for r in recorded))
        for pool_id in pool_ids:
            pool = session.get(Pool, pool_id)
            actuation.reconcile(session, session.get(Deployment, pool.deployment_id), pool, settings, now=now)
        outcomes = []
        for event, recorded in asked:
            if recorded:
                event.outcome = "; ".join(r.outcome or FOR_THE_LEADER for r in recorded)
                event.action_id = next((r.action_id for r in recorded if r.action_id), None)
            outcomes.append({"fingerprint": event.fingerprint, "alertname": event.alertname,
                             "outcome": event.outcome, "action_id": event.action_id})
    return {"received": len(body.alerts), "duplicates": num_duplicates,
            "actions": sorted({o["action_id"] for o in outcomes if o["action_id"]}), "outcomes": outcomes}


def _request(session, settings, alert: AlertIn, fingerprint: str, name: str | None, now: float,
             caller: str) -> tuple[str, list[Request]]:
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
    note = {"fingerprint": fingerprint, "alertname": alert.labels.get("alertname", ""), "startsAt": alert.startsAt}
    recorded = [requests.record(session, pool=pool, knob=PLACEMENT.kind, trigger="alert", created_by=caller,
                                alerts=[note], now=now)
                for pool in deployments.pools_of(session, deployment) if role in (None, pool.role)]
    if not recorded:
        return f"deployment {name!r} has no pool {role!r}", []
    return "", recorded
