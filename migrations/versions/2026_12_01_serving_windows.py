"""serving windows for the pool planner: per instance (replica_windows) and per router (router_windows);
the PD-aware threshold versioned on each pool like placements (version 0: not set by moectl); the pool
planner's latest plan per deployment

Revision ID: 2026_12_01_serving
Revises: 2026_12_01_knob_parks
Create Date: 2026-12-01
"""

import sqlalchemy as sa
from alembic import op

revision = "2026_12_01_serving"
down_revision = "2026_12_01_knob_parks"
branch_labels = None
depends_on = None

TS = sa.DateTime(timezone=True)
pools = sa.table("pools", sa.column("id", sa.Integer()), sa.column("created_at", TS))
thresholds = sa.table("prefill_thresholds", sa.column("pool_id", sa.Integer()), sa.column("version", sa.Integer()),
                      sa.column("tokens", sa.Integer()), sa.column("action_id", sa.Integer()),
                      sa.column("created_at", TS))


def upgrade() -> None:
    op.create_table("prefill_thresholds", sa.Column("id", sa.Integer(), primary_key=True),
                    sa.Column("pool_id", sa.Integer(), sa.ForeignKey("pools.id", ondelete="CASCADE"), nullable=False),
                    sa.Column("version", sa.Integer(), nullable=False),
                    sa.Column("tokens", sa.Integer(), nullable=True),
                    sa.Column("action_id", sa.Integer(), nullable=True),
                    sa.Column("created_at", TS, nullable=False),
                    sa.UniqueConstraint("pool_id", "version"))
    op.create_index("ix_prefill_thresholds_pool_id", "prefill_thresholds", ["pool_id"])
    # every pool starts at version 0, as a new pool does (`store.deployments.create_pool`)
    op.execute(sa.insert(thresholds).from_select(
        ["pool_id", "version", "tokens", "action_id", "created_at"],
        sa.select(pools.c.id, sa.literal(0), sa.null(), sa.null(), pools.c.created_at)))
    op.create_table("replica_windows", sa.Column("id", sa.Integer(), primary_key=True),
                    sa.Column("pool_id", sa.Integer(), sa.ForeignKey("pools.id", ondelete="CASCADE"), nullable=False),
                    sa.Column("instance", sa.String(128), nullable=False),
                    sa.Column("window_index", sa.Integer(), nullable=False),
                    sa.Column("age_windows", sa.Integer(), nullable=False),
                    sa.Column("num_reports", sa.Integer(), nullable=False),
                    sa.Column("counters", sa.JSON(), nullable=False),
                    sa.UniqueConstraint("pool_id", "instance", "window_index"))
    op.create_index("ix_replica_windows_pool_id", "replica_windows", ["pool_id"])
    op.create_table("router_windows", sa.Column("id", sa.Integer(), primary_key=True),
                    sa.Column("deployment_id", sa.Integer(), sa.ForeignKey("deployments.id", ondelete="CASCADE"),
                              nullable=False),
                    sa.Column("router", sa.String(128), nullable=False),
                    sa.Column("window_index", sa.Integer(), nullable=False),
                    sa.Column("window_seconds", sa.Float(), nullable=False),
                    sa.Column("counters", sa.JSON(), nullable=False),
                    sa.UniqueConstraint("deployment_id", "router", "window_index"))
    op.create_index("ix_router_windows_deployment_id", "router_windows", ["deployment_id"])
    op.create_table("pool_plans",
                    sa.Column("deployment_id", sa.Integer(), sa.ForeignKey("deployments.id", ondelete="CASCADE"),
                              primary_key=True),
                    sa.Column("at", sa.Float(), nullable=False),
                    sa.Column("plan", sa.JSON(), nullable=False))


def downgrade() -> None:
    # the code before this revision knows no threshold knob: its proposals can no longer be approved
    actions = sa.table("actions", sa.column("kind", sa.String()), sa.column("status", sa.String()))
    op.execute(sa.update(actions).where(actions.c.kind == "local_prefill_threshold",
                                        actions.c.status == "awaiting_approval").values(status="superseded"))
    op.drop_table("pool_plans")
    op.drop_table("router_windows")
    op.drop_table("replica_windows")
    op.drop_table("prefill_thresholds")
