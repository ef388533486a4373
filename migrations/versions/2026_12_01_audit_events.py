"""audit events: admin removals of deployments and agents, kept apart from what they removed

Revision ID: 2026_12_01_audit_events
Revises: 2026_12_01_alert_requests
Create Date: 2026-12-01
"""

import sqlalchemy as sa
from alembic import op

revision = "2026_12_01_audit_events"
down_revision = "2026_12_01_alert_requests"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table("audit_events", sa.Column("id", sa.Integer(), primary_key=True),
                    sa.Column("verb", sa.String(32), nullable=False),
                    sa.Column("deployment", sa.String(63), nullable=False),
                    sa.Column("detail", sa.JSON(), nullable=False),
                    sa.Column("created_by", sa.String(128), nullable=False),
                    sa.Column("created_at", sa.DateTime(timezone=True), nullable=False))


def downgrade() -> None:
    op.drop_table("audit_events")
