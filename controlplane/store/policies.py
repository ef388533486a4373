"""Policies: every change is a new version with its author; the highest version is active."""

from __future__ import annotations

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from controlplane.desired import Policy
from controlplane.store.tables import Deployment
from controlplane.store.tables import Policy as PolicyRow
from controlplane.store.timestamps import utc


def active(session: Session, deployment: Deployment) -> tuple[int, Policy]:
    row = session.scalar(select(PolicyRow).where(PolicyRow.deployment_id == deployment.id)
                         .order_by(PolicyRow.version.desc()).limit(1))
    if row is None:
        return 0, Policy()
    return row.version, Policy.model_validate(row.spec)


def put(session: Session, *, deployment: Deployment, policy: Policy, created_by: str, now: float) -> int:
    latest = session.scalar(select(func.max(PolicyRow.version)).where(PolicyRow.deployment_id == deployment.id))
    version = (latest or 0) + 1
    session.add(PolicyRow(deployment_id=deployment.id, version=version, spec=policy.model_dump(mode="json"),
                          created_by=created_by, created_at=utc(now)))
    session.flush()
    return version
