"""agent adapter faults: an engine adapter's failures in its last posted window (issue 40), shown as unhealthy

Revision ID: 2026_12_06_agent_adapter_faults
Revises: 2026_12_04_knob_versions
Create Date: 2026-12-06
"""

import sqlalchemy as sa
from alembic import op

revision = "2026_12_06_agent_adapter_faults"
down_revision = "2026_12_04_knob_versions"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("agents") as batch:
        batch.add_column(sa.Column("adapter_faults", sa.JSON(none_as_null=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("agents") as batch:
        batch.drop_column("adapter_faults")
