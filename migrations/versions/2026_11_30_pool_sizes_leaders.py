"""pool sizes versioned per pool like placements (version 0: not sized by moectl), what a request asks for,
leader election through the database, and the leader that wrote each action

Revision ID: 2026_11_30_pool_sizes
Revises: 2026_11_30_requests
Create Date: 2026-11-30
"""

import sqlalchemy as sa
from alembic import op

revision = "2026_11_30_pool_sizes"
down_revision = "2026_11_30_requests"
branch_labels = None
depends_on = None

TS = sa.DateTime(timezone=True)
pools = sa.table("pools", sa.column("id", sa.Integer()), sa.column("created_at", TS))
pool_sizes = sa.table("pool_sizes", sa.column("pool_id", sa.Integer()), sa.column("version", sa.Integer()),
                      sa.column("replicas", sa.Integer()), sa.column("action_id", sa.Integer()),
                      sa.column("created_at", TS))


def upgrade() -> None:
    op.create_table("pool_sizes", sa.Column("id", sa.Integer(), primary_key=True),
                    sa.Column("pool_id", sa.Integer(), sa.ForeignKey("pools.id", ondelete="CASCADE"), nullable=False),
                    sa.Column("version", sa.Integer(), nullable=False),
                    sa.Column("replicas", sa.Integer(), nullable=True),
                    sa.Column("action_id", sa.Integer(), nullable=True),
                    sa.Column("created_at", TS, nullable=False),
                    sa.UniqueConstraint("pool_id", "version"))
    op.create_index("ix_pool_sizes_pool_id", "pool_sizes", ["pool_id"])
    # every pool starts at version 0, as a new pool does (`store.deployments.create_pool`)
    op.execute(sa.insert(pool_sizes).from_select(
        ["pool_id", "version", "replicas", "action_id", "created_at"],
        sa.select(pools.c.id, sa.literal(0), sa.null(), sa.null(), pools.c.created_at)))
    op.create_table("leaders", sa.Column("name", sa.String(63), primary_key=True),
                    sa.Column("holder", sa.String(128), nullable=False),
                    sa.Column("term", sa.Integer(), nullable=False),
                    sa.Column("lease_seconds", sa.Float(), nullable=False),
                    sa.Column("renewed_at", sa.Float(), nullable=False))
    with op.batch_alter_table("requests") as batch:
        batch.add_column(sa.Column("value", sa.JSON(), nullable=True))
    with op.batch_alter_table("actions") as batch:
        batch.add_column(sa.Column("leader", sa.String(160), nullable=True))


def downgrade() -> None:
    # the code before this revision knows no pool_size knob: its proposals can no longer be approved
    actions = sa.table("actions", sa.column("kind", sa.String()), sa.column("status", sa.String()))
    op.execute(sa.update(actions).where(actions.c.kind == "pool_size", actions.c.status == "awaiting_approval")
               .values(status="superseded"))
    with op.batch_alter_table("actions") as batch:
        batch.drop_column("leader")
    with op.batch_alter_table("requests") as batch:
        batch.drop_column("value")
    op.drop_table("leaders")
    op.drop_table("pool_sizes")
