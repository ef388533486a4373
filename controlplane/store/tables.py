"""The tables of the fleet (deployments, their pools) and of what moectl decided for it: placements and knob
versions, parked knobs, pool plans, policies, the actions and the requests that led to them; and the controller's
own: leader election, API tokens, alert notifications, admin removals. What agents and routers reported is in
controlplane/store/observed_tables.py, imported here so that `Base.metadata` is the whole schema (base.py).
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import (
    JSON,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    String,
    Text,
    UniqueConstraint,
    text,
)
from sqlalchemy.orm import Mapped, mapped_column

from controlplane.store import observed_tables  # noqa: F401  (its tables join Base.metadata: the schema is whole)
from controlplane.store.base import Base


class Deployment(Base):
    __tablename__ = "deployments"
    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(63), unique=True)
    model: Mapped[dict] = mapped_column(JSON)  # agents.protocol.ModelShape
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    # the engine it runs (controlplane/plan/engines.py): what a placement change costs there
    engine: Mapped[str] = mapped_column(String(16), default="bundled", server_default="bundled")


class Pool(Base):
    """One role of a deployment (prefill, decode or unified): its instances share a placement."""

    __tablename__ = "pools"
    __table_args__ = (UniqueConstraint("deployment_id", "role"),)
    id: Mapped[int] = mapped_column(primary_key=True)
    deployment_id: Mapped[int] = mapped_column(ForeignKey("deployments.id", ondelete="CASCADE"), index=True)
    role: Mapped[str] = mapped_column(String(16))
    ep_size: Mapped[int] = mapped_column(Integer)
    slots_per_rank: Mapped[int] = mapped_column(Integer)
    gpus_per_node: Mapped[int] = mapped_column(Integer)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))


class Placement(Base):
    __tablename__ = "placements"
    __table_args__ = (UniqueConstraint("pool_id", "version"),)
    id: Mapped[int] = mapped_column(primary_key=True)
    pool_id: Mapped[int] = mapped_column(ForeignKey("pools.id", ondelete="CASCADE"), index=True)
    version: Mapped[int] = mapped_column(Integer)
    slot_to_expert: Mapped[bytes] = mapped_column(LargeBinary)
    slot_share: Mapped[bytes | None] = mapped_column(LargeBinary, nullable=True)
    action_id: Mapped[int | None] = mapped_column(Integer, nullable=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))


class KnobVersion(Base):
    """A version of one of a pool's scalar knobs (`knob`: the actions' kind), versioned per pool like placements:
    the routing limit (max groups per token), the pool size (instances) or the local-prefill threshold (tokens,
    on the decode pool). Version 0 (value None) exists from the pool's creation: moectl has not set it."""

    __tablename__ = "knob_versions"
    __table_args__ = (UniqueConstraint("pool_id", "knob", "version"),)
    id: Mapped[int] = mapped_column(primary_key=True)
    pool_id: Mapped[int] = mapped_column(ForeignKey("pools.id", ondelete="CASCADE"), index=True)
    knob: Mapped[str] = mapped_column(String(32))
    version: Mapped[int] = mapped_column(Integer)
    value: Mapped[int | None] = mapped_column(Integer, nullable=True)
    action_id: Mapped[int | None] = mapped_column(Integer, nullable=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))


class KnobPark(Base):
    """A knob parked for a pool after a reverted change, with the inputs it was parked at; it stands until they
    change materially (controlplane/plan/parking.py), then `released_at` and why are recorded."""

    __tablename__ = "knob_parks"
    id: Mapped[int] = mapped_column(primary_key=True)
    pool_id: Mapped[int] = mapped_column(ForeignKey("pools.id", ondelete="CASCADE"), index=True)
    knob: Mapped[str] = mapped_column(String(32))
    action_id: Mapped[int | None] = mapped_column(Integer, nullable=True)  # whose verdict parked it
    reason: Mapped[str] = mapped_column(Text)
    model_key: Mapped[str] = mapped_column(String(64))
    policy_version: Mapped[int] = mapped_column(Integer)
    tokens_per_second: Mapped[float | None] = mapped_column(Float, nullable=True)
    expert_share: Mapped[bytes | None] = mapped_column(LargeBinary, nullable=True)  # [num_layers, num_experts] .npy
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    released_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    release_reason: Mapped[str] = mapped_column(Text, default="")


class PoolPlanRow(Base):
    """The pool planner's latest plan of a deployment, for people: sizes, reasons, forecast, threshold."""

    __tablename__ = "pool_plans"
    deployment_id: Mapped[int] = mapped_column(ForeignKey("deployments.id", ondelete="CASCADE"), primary_key=True)
    at: Mapped[float] = mapped_column(Float)
    plan: Mapped[dict] = mapped_column(JSON)


class Leader(Base):
    """Leader election through the database (`controlplane.leader.database`): one row per election, taken
    and renewed by compare-and-set; `term` grows by one with every change of holder."""

    __tablename__ = "leaders"
    name: Mapped[str] = mapped_column(String(63), primary_key=True)
    holder: Mapped[str] = mapped_column(String(128))
    term: Mapped[int] = mapped_column(Integer)
    lease_seconds: Mapped[float] = mapped_column(Float)
    renewed_at: Mapped[float] = mapped_column(Float)  # the holder's clock, unix seconds: for people to read


class Policy(Base):
    """Every version is kept; the highest is active."""

    __tablename__ = "policies"
    __table_args__ = (UniqueConstraint("deployment_id", "version"),)
    id: Mapped[int] = mapped_column(primary_key=True)
    deployment_id: Mapped[int] = mapped_column(ForeignKey("deployments.id", ondelete="CASCADE"), index=True)
    version: Mapped[int] = mapped_column(Integer)
    spec: Mapped[dict] = mapped_column(JSON)  # desired.Policy
    note: Mapped[str] = mapped_column(Text, default="")
    created_by: Mapped[str] = mapped_column(String(128))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))


class Action(Base):
    """The audit trail: every decision the loop (or a person, or an alert) made, and what came of it."""

    __tablename__ = "actions"
    id: Mapped[int] = mapped_column(primary_key=True)
    deployment_id: Mapped[int] = mapped_column(ForeignKey("deployments.id", ondelete="CASCADE"), index=True)
    pool_id: Mapped[int | None] = mapped_column(ForeignKey("pools.id", ondelete="CASCADE"), nullable=True)
    kind: Mapped[str] = mapped_column(String(32))  # the knob it changes (placement, routing), or diagnosis
    trigger: Mapped[str] = mapped_column(String(16))  # loop, alert, manual
    mode: Mapped[str] = mapped_column(String(16))
    status: Mapped[str] = mapped_column(String(24))
    reason: Mapped[str] = mapped_column(Text)
    inputs: Mapped[dict] = mapped_column(JSON)
    predicted: Mapped[dict] = mapped_column(JSON)
    measured: Mapped[dict] = mapped_column(JSON)
    version: Mapped[int | None] = mapped_column(Integer, nullable=True)  # the version of its knob it made
    # the proposed table ([num_layers, num_slots] .npy) while the action waits for approval
    proposal: Mapped[bytes | None] = mapped_column(LargeBinary, nullable=True)
    proposal_share: Mapped[bytes | None] = mapped_column(LargeBinary, nullable=True)
    based_on_version: Mapped[int | None] = mapped_column(Integer, nullable=True)
    alerts: Mapped[list] = mapped_column(JSON, default=list)  # alerts that triggered or joined it
    created_by: Mapped[str] = mapped_column(String(128))
    # the controller replica that wrote it while leading ("identity#term"); None without leader election
    leader: Mapped[str | None] = mapped_column(String(160), nullable=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))


class Request(Base):
    """A trigger's ask to reconcile one knob of a pool (a person's rebalance, an alert), handled by the
    pool's next reconcile: the action it led to or joined, or why none."""

    __tablename__ = "requests"
    id: Mapped[int] = mapped_column(primary_key=True)
    pool_id: Mapped[int] = mapped_column(ForeignKey("pools.id", ondelete="CASCADE"), index=True)
    knob: Mapped[str] = mapped_column(String(32))  # placement, pool_size
    trigger: Mapped[str] = mapped_column(String(16))  # alert, manual
    value: Mapped[dict | None] = mapped_column(JSON, nullable=True)  # what it asks for (pool_size: replicas)
    created_by: Mapped[str] = mapped_column(String(128))
    alerts: Mapped[list] = mapped_column(JSON, default=list)  # the alerts it carries
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    handled_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    action_id: Mapped[int | None] = mapped_column(Integer, nullable=True)
    outcome: Mapped[str] = mapped_column(Text, default="")
    # the alert that asked (an alert naming no role asks each pool of its deployment: one request each)
    alert_event_id: Mapped[int | None] = mapped_column(
        ForeignKey("alert_events.id", ondelete="SET NULL", name="fk_requests_alert_event_id"), nullable=True,
        index=True)


class Token(Base):
    """API tokens: only a SHA-256 of the secret is kept (the secret is 32 random bytes, so no salt
    or slow hash is needed), with a short prefix to recognise it by. A name is unique among tokens not
    revoked: a revoked token keeps its row (and its name in the audit trail) while a new one takes the name."""

    __tablename__ = "tokens"
    __table_args__ = (Index("ix_tokens_active_name", "name", unique=True, sqlite_where=text("revoked_at IS NULL"),
                            postgresql_where=text("revoked_at IS NULL")),)
    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(128))
    role: Mapped[str] = mapped_column(String(16))  # viewer, operator, admin, agent, alerts
    secret_sha256: Mapped[str] = mapped_column(String(64), unique=True)
    prefix: Mapped[str] = mapped_column(String(12))
    created_by: Mapped[str] = mapped_column(String(128))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    revoked_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)


class AlertEvent(Base):
    """Each Alertmanager notification of an alert, once: delivery is at-least-once. What came of an
    alert that asked for something is its requests' outcome (`store.alerts.outcomes`); `outcome` holds
    why it asked nothing (or was rejected), and `action_id` was set only before requests named their event."""

    __tablename__ = "alert_events"
    __table_args__ = (UniqueConstraint("fingerprint", "starts_at", "status"),)
    id: Mapped[int] = mapped_column(primary_key=True)
    fingerprint: Mapped[str] = mapped_column(String(64))
    starts_at: Mapped[str] = mapped_column(String(40))
    status: Mapped[str] = mapped_column(String(16))
    alertname: Mapped[str] = mapped_column(String(256))
    deployment: Mapped[str | None] = mapped_column(String(63), nullable=True)
    labels: Mapped[dict] = mapped_column(JSON)
    action_id: Mapped[int | None] = mapped_column(Integer, nullable=True)
    outcome: Mapped[str] = mapped_column(Text)
    received_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))


class AuditEvent(Base):
    """Admin removals (a deployment with its audit trail, agents): who removed what, kept apart from what
    it removed so the record outlives it."""

    __tablename__ = "audit_events"
    id: Mapped[int] = mapped_column(primary_key=True)
    verb: Mapped[str] = mapped_column(String(32))  # delete_deployment, delete_agents
    deployment: Mapped[str] = mapped_column(String(63))
    detail: Mapped[dict] = mapped_column(JSON)  # what was removed: names, counts, last seen
    created_by: Mapped[str] = mapped_column(String(128))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
