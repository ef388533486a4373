"""tokens with roles, alert events (dedupe), proposals on actions for approval, policy notes,
routing limits on pools

Revision ID: 2026_11_29_tokens_alerts
Revises: 2026_11_29_initial
Create Date: 2026-11-29
"""

import sqlalchemy as sa
from alembic import op

revision = "2026_11_29_tokens_alerts"
down_revision = "2026_11_29_initial"
branch_labels = None
depends_on = None

TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table("tokens", sa.Column("id", sa.Integer(), primary_key=True),
                    sa.Column("name", sa.String(128), nullable=False, unique=True),
                    sa.Column("role", sa.String(16), nullable=False),
                    sa.Column("secret_sha256", sa.String(64), nullable=False, unique=True),
                    sa.Column("prefix", sa.String(12), nullable=False),
                    sa.Column("created_by", sa.String(128), nullable=False),
                    sa.Column("created_at", TS, nullable=False),
                    sa.Column("revoked_at", TS, nullable=True))
    op.create_table("alert_events", sa.Column("id", sa.Integer(), primary_key=True),
                    sa.Column("fingerprint", sa.String(64), nullable=False),
                    sa.Column("starts_at", sa.String(40), nullable=False),
                    sa.Column("status", sa.String(16), nullable=False),
                    sa.Column("alertname", sa.String(256), nullable=False),
                    sa.Column("deployment", sa.String(63), nullable=True),
                    sa.Column("labels", sa.JSON(), nullable=False),
                    sa.Column("action_id", sa.Integer(), nullable=True),
                    sa.Column("outcome", sa.Text(), nullable=False),
                    sa.Column("received_at", TS, nullable=False),
                    sa.UniqueConstraint("fingerprint", "starts_at", "status"))
    with op.batch_alter_table("actions") as batch:
        batch.add_column(sa.Column("proposal", sa.LargeBinary(), nullable=True))
        batch.add_column(sa.Column("proposal_share", sa.LargeBinary(), nullable=True))
        batch.add_column(sa.Column("based_on_version", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("alerts", sa.JSON(), nullable=False, server_default="[]"))
    with op.batch_alter_table("policies") as batch:
        batch.add_column(sa.Column("note", sa.Text(), nullable=False, server_default=""))
    with op.batch_alter_table("pools") as batch:
        batch.add_column(sa.Column("topk_group", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("routing_changed_at", sa.Float(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("pools") as batch:
        batch.drop_column("routing_changed_at")
        batch.drop_column("topk_group")
    with op.batch_alter_table("policies") as batch:
        batch.drop_column("note")
    with op.batch_alter_table("actions") as batch:
        for column in ("alerts", "based_on_version", "proposal_share", "proposal"):
            batch.drop_column(column)
    op.drop_table("alert_events")
    op.drop_table("tokens")
