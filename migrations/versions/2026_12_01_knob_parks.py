"""knob parks: a knob whose change was reverted stays parked for its pool until its inputs change materially

Revision ID: 2026_12_01_knob_parks
Revises: 2026_12_01_audit_events
Create Date: 2026-12-01
"""

import sqlalchemy as sa
from alembic import op

revision = "2026_12_01_knob_parks"
down_revision = "2026_12_01_audit_events"
branch_labels = None
depends_on = None

TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table("knob_parks", sa.Column("id", sa.Integer(), primary_key=True),
                    sa.Column("pool_id", sa.Integer(), sa.ForeignKey("pools.id", ondelete="CASCADE"), nullable=False),
                    sa.Column("knob", sa.String(32), nullable=False),
                    sa.Column("action_id", sa.Integer(), nullable=True),
                    sa.Column("reason", sa.Text(), nullable=False),
                    sa.Column("model_key", sa.String(64), nullable=False),
                    sa.Column("policy_version", sa.Integer(), nullable=False),
                    sa.Column("tokens_per_second", sa.Float(), nullable=True),
                    sa.Column("expert_share", sa.LargeBinary(), nullable=True),
                    sa.Column("created_at", TS, nullable=False),
                    sa.Column("released_at", TS, nullable=True),
                    sa.Column("release_reason", sa.Text(), nullable=False))
    op.create_index("ix_knob_parks_pool_id", "knob_parks", ["pool_id"])


def downgrade() -> None:
    op.drop_index("ix_knob_parks_pool_id", table_name="knob_parks")
    op.drop_table("knob_parks")
