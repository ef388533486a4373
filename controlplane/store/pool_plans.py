"""The pool planner's latest plan per deployment, as people read it (dashboard, `moectl status`, metrics):
one row, replaced each pass. The last forecast is kept until the next predictive tick makes another."""

from __future__ import annotations

from sqlalchemy.orm import Session

from controlplane.store.tables import Deployment, PoolPlanRow


def put(session: Session, deployment: Deployment, *, at: float, plan: dict) -> None:
    row = session.get(PoolPlanRow, deployment.id, with_for_update=True)
    if row is None:
        session.add(PoolPlanRow(deployment_id=deployment.id, at=at, plan=plan))
    else:
        if plan.get("forecast") is None:
            plan = plan | {"forecast": row.plan.get("forecast")}
        row.at, row.plan = at, plan
    session.flush()


def get(session: Session, deployment: Deployment) -> dict | None:
    row = session.get(PoolPlanRow, deployment.id)
    return None if row is None else row.plan
