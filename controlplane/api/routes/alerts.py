"""Alertmanager webhook (payload version 4): alerts that ask for a rebalance trigger one.

Delivery is at-least-once and alerts come in storms, so: each (fingerprint, startsAt, status) is
handled once, and alerts for a pool that already has an action in flight join that action
instead of starting another. The policy's mode and cooldowns apply as for the loop.
"""

from __future__ import annotations

import hashlib
import json

from fastapi import APIRouter, HTTPException
from pydantic import BaseModel, ConfigDict, Field

from controlplane import decisions
from controlplane.api.deps import AlertsDep, NowDep, SessionDep, SettingsDep
from controlplane.desired import Mode
from controlplane.plan import plan_pool
from controlplane.store import actions, alerts, deployments, policies, pools

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
def alertmanager(body: WebhookIn, session: SessionDep, settings: SettingsDep, now: NowDep, caller: AlertsDep) -> dict:
    if body.version != "4":
        raise HTTPException(422, f"Alertmanager webhook payload version {body.version!r} is not supported; "
                                 f"this endpoint reads version '4'")
    outcomes, action_ids, num_duplicates = [], set(), 0
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
            event.outcome, event.action_id = _handle(session, settings, alert, fingerprint, name, now, caller.name)
            if event.action_id:
                action_ids.add(event.action_id)
            outcomes.append({"fingerprint": fingerprint, "alertname": event.alertname, "outcome": event.outcome,
                             "action_id": event.action_id})
    return {"received": len(body.alerts), "duplicates": num_duplicates, "actions": sorted(action_ids),
            "outcomes": outcomes}


def _handle(session, settings, alert: AlertIn, fingerprint: str, name: str | None, now: float,
            caller: str) -> tuple[str, int | None]:
    if name is None:
        return f"no '{settings.alert_deployment_label}' label: not mapped to a deployment", None
    deployment = deployments.get(session, name)
    if deployment is None:
        return f"deployment {name!r} is not registered", None
    if alert.status == "resolved":
        return "resolved", None
    if alert.labels.get(ACTION_LABEL) != REBALANCE:
        return f"recorded; no '{ACTION_LABEL}: {REBALANCE}' label, so no action", None
    _, policy = policies.active(session, deployment)
    if policy.mode == Mode.off:
        return "policy mode is off", None
    role = alert.labels.get("role")
    note = {"fingerprint": fingerprint, "alertname": alert.labels.get("alertname", ""), "startsAt": alert.startsAt}
    results = []
    for pool in deployments.pools_of(session, deployment):
        if role not in (None, pool.role):
            continue
        in_flight = actions.open_for(session, pool, since=now - max(policy.cooldown_seconds, 3600.0))
        if in_flight is not None:  # a storm: every alert joins the one action
            in_flight.alerts = [*in_flight.alerts, note]
            results.append((f"joined action {in_flight.id}", in_flight.id))
            continue
        state = pools.read_state(session, deployment, pool, now=now, settings=settings)
        plan = plan_pool(policy, state, now, is_forced=True)
        action = decisions.record_plan(session, deployment=deployment, pool=pool, state=state, policy=policy,
                                       plan=plan, trigger="alert", created_by=caller, now=now, alerts=[note])
        results.append((f"action {action.id} {action.status}", action.id) if action else
                       (f"{plan.decision.value}: {plan.reason}", None))
    if not results:
        return f"deployment {name!r} has no pool {role!r}", None
    return "; ".join(r[0] for r in results), next((r[1] for r in results if r[1]), None)
