"""One action in flight per pool and knob, whoever triggers: the loop, a person or an alert.

In flight: a proposal waiting for a person (however old: it stands until decided), or a change
planned or applied within the knob's hold, the policy's cooldown (at least one window). While one is
in flight no trigger starts another: the loop does not record the same plan again each pass, and a
person's or an alert's request joins it (a storm of alerts is one action).
"""

from __future__ import annotations

from sqlalchemy.orm import Session

from controlplane.desired import Policy
from controlplane.store import actions
from controlplane.store.tables import Action, Pool
from controlplane.store.timestamps import utc


def in_flight(session: Session, pool: Pool, kind: str, *, policy: Policy, window_seconds: float,
              now: float) -> Action | None:
    hold = max(policy.cooldown_seconds, window_seconds)
    return (actions.open_for(session, pool, since=0.0, kind=kind, statuses=(actions.AWAITING_APPROVAL,))
            or actions.open_for(session, pool, since=now - hold, kind=kind,
                                statuses=(actions.PLANNED, actions.APPLIED)))


def join(action: Action, *, alerts: list, now: float) -> None:
    """A request joins the action in flight: the alerts it carries are added to the action's."""
    if alerts:
        action.alerts, action.updated_at = [*action.alerts, *alerts], utc(now)
