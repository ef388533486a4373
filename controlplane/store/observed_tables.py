"""The tables of what was observed: the agents that report (one row per instance rank), the load windows their
reports are summed into, the placement-change costs they timed, the serving windows of instances and routers:
what the planners read. Base and the schema's conventions: controlplane/store/base.py.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import JSON, DateTime, Float, ForeignKey, Integer, LargeBinary, String, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from controlplane.store.base import Base


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
    # an engine adapter's failures in its last posted window, cause -> count (GroupSnapshot.adapter_faults)
    adapter_faults: Mapped[dict | None] = mapped_column(JSON(none_as_null=True), nullable=True, default=None)


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


class ChangeCost(Base):
    """What a pool's placement changes cost, as its agents measured them (controlplane/observed/measured_cost.py): the
    timed acts folded in so far, their mean and the newest seconds per act, up to window `last_window_index`."""

    __tablename__ = "change_costs"
    id: Mapped[int] = mapped_column(primary_key=True)
    pool_id: Mapped[int] = mapped_column(ForeignKey("pools.id", ondelete="CASCADE"), unique=True)
    num_measured: Mapped[int] = mapped_column(Integer)
    mean_seconds: Mapped[float] = mapped_column(Float)
    last_seconds: Mapped[float] = mapped_column(Float)
    last_window_index: Mapped[int] = mapped_column(Integer)
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))


class ReplicaWindow(Base):
    """One instance's serving work over one window, its ranks' reports merged (collect/serving.py)."""

    __tablename__ = "replica_windows"
    __table_args__ = (UniqueConstraint("pool_id", "instance", "window_index"),)
    id: Mapped[int] = mapped_column(primary_key=True)
    pool_id: Mapped[int] = mapped_column(ForeignKey("pools.id", ondelete="CASCADE"), index=True)
    instance: Mapped[str] = mapped_column(String(128))
    window_index: Mapped[int] = mapped_column(Integer)
    age_windows: Mapped[int] = mapped_column(Integer)  # windows the instance reported before this one (fewest rank)
    num_reports: Mapped[int] = mapped_column(Integer, default=0)
    counters: Mapped[dict] = mapped_column(JSON)


class RouterWindow(Base):
    """One router's window of a deployment: arrivals, lengths, end-to-end latencies (collect/serving.py)."""

    __tablename__ = "router_windows"
    __table_args__ = (UniqueConstraint("deployment_id", "router", "window_index"),)
    id: Mapped[int] = mapped_column(primary_key=True)
    deployment_id: Mapped[int] = mapped_column(ForeignKey("deployments.id", ondelete="CASCADE"), index=True)
    router: Mapped[str] = mapped_column(String(128))
    window_index: Mapped[int] = mapped_column(Integer)
    window_seconds: Mapped[float] = mapped_column(Float)
    counters: Mapped[dict] = mapped_column(JSON)
