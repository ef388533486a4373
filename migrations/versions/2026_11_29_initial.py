"""initial schema: deployments, pools, agents, load windows, placements, policies, actions

Revision ID: 2026_11_29_initial
Revises:
Create Date: 2026-11-29
"""

import sqlalchemy as sa
from alembic import op

revision = "2026_11_29_initial"
down_revision = None
branch_labels = None
depends_on = None

TS = sa.DateTime(timezone=True)


def _id() -> sa.Column:
    return sa.Column("id", sa.Integer(), primary_key=True)


def _fk(name: str, table: str, nullable: bool = False) -> sa.Column:
    return sa.Column(name, sa.Integer(), sa.ForeignKey(f"{table}.id", ondelete="CASCADE"), nullable=nullable)


def upgrade() -> None:
    op.create_table("deployments", _id(), sa.Column("name", sa.String(63), nullable=False, unique=True),
                    sa.Column("model", sa.JSON(), nullable=False), sa.Column("created_at", TS, nullable=False))
    op.create_table("pools", _id(), _fk("deployment_id", "deployments"),
                    sa.Column("role", sa.String(16), nullable=False),
                    sa.Column("ep_size", sa.Integer(), nullable=False),
                    sa.Column("slots_per_rank", sa.Integer(), nullable=False),
                    sa.Column("gpus_per_node", sa.Integer(), nullable=False),
                    sa.Column("created_at", TS, nullable=False),
                    sa.UniqueConstraint("deployment_id", "role"))
    op.create_table("agents", _id(), _fk("pool_id", "pools"),
                    sa.Column("instance", sa.String(128), nullable=False),
                    sa.Column("rank", sa.Integer(), nullable=False),
                    sa.Column("node", sa.String(256), nullable=False),
                    sa.Column("gpu_uuid", sa.String(128), nullable=False),
                    sa.Column("first_seen", sa.Float(), nullable=False),
                    sa.Column("last_seen", sa.Float(), nullable=False),
                    sa.Column("last_window_index", sa.Integer(), nullable=False),
                    sa.Column("placement_version", sa.Integer(), nullable=False),
                    sa.Column("num_windows", sa.Integer(), nullable=False),
                    sa.UniqueConstraint("pool_id", "instance", "rank"))
    op.create_table("load_windows", _id(), _fk("pool_id", "pools"),
                    sa.Column("window_index", sa.Integer(), nullable=False),
                    sa.Column("window_start", sa.Float(), nullable=False),
                    sa.Column("window_seconds", sa.Float(), nullable=False),
                    sa.Column("placement_version", sa.Integer(), nullable=False),
                    sa.Column("num_reports", sa.Integer(), nullable=False),
                    sa.Column("num_slot_reports", sa.Integer(), nullable=False),
                    sa.Column("expert_tokens", sa.LargeBinary(), nullable=False),
                    sa.Column("slot_tokens", sa.LargeBinary(), nullable=False),
                    sa.Column("counters", sa.JSON(), nullable=False),
                    sa.UniqueConstraint("pool_id", "window_index"))
    op.create_table("placements", _id(), _fk("pool_id", "pools"),
                    sa.Column("version", sa.Integer(), nullable=False),
                    sa.Column("slot_to_expert", sa.LargeBinary(), nullable=False),
                    sa.Column("slot_share", sa.LargeBinary(), nullable=True),
                    sa.Column("action_id", sa.Integer(), nullable=True),
                    sa.Column("created_at", TS, nullable=False),
                    sa.UniqueConstraint("pool_id", "version"))
    op.create_table("policies", _id(), _fk("deployment_id", "deployments"),
                    sa.Column("version", sa.Integer(), nullable=False),
                    sa.Column("spec", sa.JSON(), nullable=False),
                    sa.Column("created_by", sa.String(128), nullable=False),
                    sa.Column("created_at", TS, nullable=False),
                    sa.UniqueConstraint("deployment_id", "version"))
    op.create_table("actions", _id(), _fk("deployment_id", "deployments"), _fk("pool_id", "pools", True),
                    sa.Column("kind", sa.String(32), nullable=False),
                    sa.Column("trigger", sa.String(16), nullable=False),
                    sa.Column("mode", sa.String(16), nullable=False),
                    sa.Column("status", sa.String(24), nullable=False),
                    sa.Column("reason", sa.Text(), nullable=False),
                    sa.Column("inputs", sa.JSON(), nullable=False),
                    sa.Column("predicted", sa.JSON(), nullable=False),
                    sa.Column("measured", sa.JSON(), nullable=False),
                    sa.Column("placement_version", sa.Integer(), nullable=True),
                    sa.Column("created_by", sa.String(128), nullable=False),
                    sa.Column("created_at", TS, nullable=False),
                    sa.Column("updated_at", TS, nullable=False))
    for table, column in [("pools", "deployment_id"), ("agents", "pool_id"), ("load_windows", "pool_id"),
                          ("placements", "pool_id"), ("policies", "deployment_id"),
                          ("actions", "deployment_id")]:
        op.create_index(f"ix_{table}_{column}", table, [column])


def downgrade() -> None:
    for table in ["actions", "policies", "placements", "load_windows", "agents", "pools", "deployments"]:
        op.drop_table(table)
