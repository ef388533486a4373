"""Tables. Arrays are stored as .npy bytes (`store.arrays`), counters as columns.

Migrations in top-level `migrations/` must match these (`tests/controlplane/test_migrations.py`
runs alembic's autogenerate comparison).
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import JSON, DateTime, Float, ForeignKey, Integer, LargeBinary, String, Text, UniqueConstraint
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column


class Base(DeclarativeBase):
    pass


class Deployment(Base):
    __tablename__ = "deployments"
    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(63), unique=True)
    model: Mapped[dict] = mapped_column(JSON)  # agents.protocol.ModelShape
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))


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


class Agent(Base):
    __tablename__ = "agents"
    __table_args__ = (UniqueConstraint("pool_id", "instance", "rank"),)
    id: Mapped[int] = mapped_column(primary_key=True)
    pool_id: Mapped[int] = mapped_column(ForeignKey("pools.id", ondelete="CASCADE"), index=True)
    instance: Mapped[str] = mapped_column(String(128))
    rank: Mapped[int] = mapped_column(Integer)
    node: Mapped[str] = mapped_column(String(256), default="")
    gpu_uuid: Mapped[str] = mapped_column(String(128), default="")
    first_seen: Mapped[float] = mapped_column(Float)
    last_seen: Mapped[float] = mapped_column(Float)
    last_window_index: Mapped[int] = mapped_column(Integer)
    placement_version: Mapped[int] = mapped_column(Integer)
    num_windows: Mapped[int] = mapped_column(Integer, default=0)


class LoadWindow(Base):
    """All reports of one pool for one window, summed.

    expert_tokens: [num_layers, num_experts]; slot_tokens: [num_layers, num_slots], summed over
    instances and only from reports that ran `placement_version` (so per-GPU load is never mixed
    across placements).
    """

    __tablename__ = "load_windows"
    __table_args__ = (UniqueConstraint("pool_id", "window_index"),)
    id: Mapped[int] = mapped_column(primary_key=True)
    pool_id: Mapped[int] = mapped_column(ForeignKey("pools.id", ondelete="CASCADE"), index=True)
    window_index: Mapped[int] = mapped_column(Integer)
    window_start: Mapped[float] = mapped_column(Float)
    window_seconds: Mapped[float] = mapped_column(Float)
    placement_version: Mapped[int] = mapped_column(Integer)
    num_reports: Mapped[int] = mapped_column(Integer, default=0)
    num_slot_reports: Mapped[int] = mapped_column(Integer, default=0)
    expert_tokens: Mapped[bytes] = mapped_column(LargeBinary)
    slot_tokens: Mapped[bytes] = mapped_column(LargeBinary)
    counters: Mapped[dict] = mapped_column(JSON)  # see collect.aggregate.COUNTERS


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


class Policy(Base):
    """Every version is kept; the highest is active."""

    __tablename__ = "policies"
    __table_args__ = (UniqueConstraint("deployment_id", "version"),)
    id: Mapped[int] = mapped_column(primary_key=True)
    deployment_id: Mapped[int] = mapped_column(ForeignKey("deployments.id", ondelete="CASCADE"), index=True)
    version: Mapped[int] = mapped_column(Integer)
    spec: Mapped[dict] = mapped_column(JSON)  # desired.Policy
    created_by: Mapped[str] = mapped_column(String(128))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))


class Action(Base):
    """The audit trail: every decision the loop (or a person, or an alert) made, and what came of it."""

    __tablename__ = "actions"
    id: Mapped[int] = mapped_column(primary_key=True)
    deployment_id: Mapped[int] = mapped_column(ForeignKey("deployments.id", ondelete="CASCADE"), index=True)
    pool_id: Mapped[int | None] = mapped_column(ForeignKey("pools.id", ondelete="CASCADE"), nullable=True)
    kind: Mapped[str] = mapped_column(String(32))  # placement
    trigger: Mapped[str] = mapped_column(String(16))  # loop, alert, manual
    mode: Mapped[str] = mapped_column(String(16))
    status: Mapped[str] = mapped_column(String(24))
    reason: Mapped[str] = mapped_column(Text)
    inputs: Mapped[dict] = mapped_column(JSON)
    predicted: Mapped[dict] = mapped_column(JSON)
    measured: Mapped[dict] = mapped_column(JSON)
    placement_version: Mapped[int | None] = mapped_column(Integer, nullable=True)
    created_by: Mapped[str] = mapped_column(String(128))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
