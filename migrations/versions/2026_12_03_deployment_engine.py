"""deployment engine: which engine a deployment runs (bundled, sglang, vllm), what the planner's rails follow

Revision ID: 2026_12_03_deployment_engine
Revises: 2026_12_01_serving
Create Date: 2026-12-03
"""

import sqlalchemy as sa
from alembic import op

revision = "2026_12_03_deployment_engine"
down_revision = "2026_12_01_serving"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("deployments") as batch:
        batch.add_column(sa.Column("engine", sa.String(16), nullable=False, server_default="bundled"))


def downgrade() -> None:
    with op.batch_alter_table("deployments") as batch:
        batch.drop_column("engine")
