"""expert capacity: every pool holds version 0 of the per-expert capacity factor (no cap), as a pool created from
now on does (store/deployments.py `create_pool`); a knob of the shared version table needs no table of its own

Revision ID: 2026_12_06_expert_capacity
Revises: 2026_12_06_agent_adapter_faults
Create Date: 2026-12-06
"""

import sqlalchemy as sa
from alembic import op

revision = "2026_12_06_expert_capacity"
down_revision = "2026_12_06_agent_adapter_faults"
branch_labels = None
depends_on = None

KNOB = "expert_capacity"
COLUMNS = ("pool_id", "knob", "version", "value", "action_id", "created_at")
knob_versions = sa.table("knob_versions", *(sa.column(name) for name in COLUMNS))
pools = sa.table("pools", sa.column("id"), sa.column("created_at"))


def upgrade() -> None:
    op.execute(sa.insert(knob_versions).from_select(
        list(COLUMNS), sa.select(pools.c.id, sa.literal(KNOB), sa.literal(0), sa.null(), sa.null(),
                                 pools.c.created_at)))


def downgrade() -> None:
    op.execute(sa.delete(knob_versions).where(knob_versions.c.knob == KNOB))
