"""change costs: what a pool's placement changes cost, as its agents measured them (issue 42)

Revision ID: 2026_12_06_change_costs
Revises: 2026_12_06_expert_capacity
Create Date: 2026-12-06
"""

import sqlalchemy as sa
from alembic import op

revision = "2026_12_06_change_costs"
down_revision = "2026_12_06_expert_capacity"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table("change_costs", sa.Column("id", sa.Integer(), primary_key=True),
                    sa.Column("pool_id", sa.Integer(), sa.ForeignKey("pools.id", ondelete="CASCADE"), nullable=False,
                              unique=True),
                    sa.Column("num_measured", sa.Integer(), nullable=False),
                    sa.Column("mean_seconds", sa.Float(), nullable=False),
                    sa.Column("last_seconds", sa.Float(), nullable=False),
                    sa.Column("last_window_index", sa.Integer(), nullable=False),
                    sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False))


def downgrade() -> None:
    op.drop_table("change_costs")
