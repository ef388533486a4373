"""Policies: every change is a new version with its author; the highest version is active."""

from __future__ import annotations

from sqlalchemy import ColumnElement, and_, func, select
from sqlalchemy.orm import Session, aliased

from controlplane.desired import Policy
from controlplane.store.tables import Deployment
from controlplane.store.tables import Policy as PolicyRow
from controlplane.store.timestamps import seconds, utc


def latest_row(session: Session, deployment: Deployment) -> PolicyRow:
    return session.scalar(select(PolicyRow).where(PolicyRow.deployment_id == deployment.id)
                          .order_by(PolicyRow.version.desc()).limit(1))


def active(session: Session, deployment: Deployment) -> tuple[int, Policy]:
    return of_row(latest_row(session, deployment))


def is_active(deployment_id: ColumnElement[int]) -> ColumnElement[bool]:
    """Join criterion: the policy row is the active (highest) version of the deployment whose id `deployment_id`
    is (a column of another table of the query)."""
    other = aliased(PolicyRow)
    newest = select(func.max(other.version)).where(other.deployment_id == deployment_id).scalar_subquery()
    return and_(PolicyRow.deployment_id == deployment_id, PolicyRow.version == newest)


def of_row(row: PolicyRow | None) -> tuple[int, Policy]:
    """`active`'s answer from the active row (None: the deployment has none)."""
    return (0, Policy()) if row is None else (row.version, Policy.model_validate(row.spec))


def version_row(session: Session, deployment: Deployment, version: int) -> PolicyRow | None:
    return session.scalar(select(PolicyRow).where(PolicyRow.deployment_id == deployment.id,
                                                  PolicyRow.version == version))


def history(session: Session, deployment: Deployment) -> list[PolicyRow]:
    return list(session.scalars(select(PolicyRow).where(PolicyRow.deployment_id == deployment.id)
                                .order_by(PolicyRow.version.desc())))


def put(session: Session, *, deployment: Deployment, policy: Policy, created_by: str, now: float,
        note: str = "") -> int:
    latest = session.scalar(select(func.max(PolicyRow.version)).where(PolicyRow.deployment_id == deployment.id))
    version = (latest or 0) + 1
    session.add(PolicyRow(deployment_id=deployment.id, version=version, spec=policy.model_dump(mode="json"),
                          note=note, created_by=created_by, created_at=utc(now)))
    session.flush()
    return version


def out(row: PolicyRow) -> dict:
    return {"version": row.version, "policy": Policy.model_validate(row.spec).model_dump(mode="json"),
            "created_by": row.created_by, "created_at": seconds(row.created_at), "note": row.note}
