"""knob versions: the routing limit, pool size and local-prefill threshold share one version table, one row per
(pool, knob, version) with its number in `value`; a new scalar knob needs no table of its own

Revision ID: 2026_12_04_knob_versions
Revises: 2026_12_03_deployment_engine
Create Date: 2026-12-04
"""

import sqlalchemy as sa
from alembic import op

revision = "2026_12_04_knob_versions"
down_revision = "2026_12_03_deployment_engine"
branch_labels = None
depends_on = None

TS = sa.DateTime(timezone=True)
# each knob's old table and the column its value was kept in; `knob` is the actions' and requests' kind
OLD_TABLES = (("routing", "routing_limits", "topk_group"), ("pool_size", "pool_sizes", "replicas"),
              ("local_prefill_threshold", "prefill_thresholds", "tokens"))
COLUMNS = ("pool_id", "version", "action_id", "created_at")
knob_versions = sa.table("knob_versions", sa.column("knob", sa.String(32)), sa.column("value", sa.Integer()),
                         *(sa.column(name) for name in COLUMNS))


def _old_table(name: str, value: str) -> sa.TableClause:
    return sa.table(name, sa.column(value, sa.Integer()), *(sa.column(column) for column in COLUMNS))


def upgrade() -> None:
    op.create_table("knob_versions", sa.Column("id", sa.Integer(), primary_key=True),
                    sa.Column("pool_id", sa.Integer(), sa.ForeignKey("pools.id", ondelete="CASCADE"), nullable=False),
                    sa.Column("knob", sa.String(32), nullable=False),
                    sa.Column("version", sa.Integer(), nullable=False),
                    sa.Column("value", sa.Integer(), nullable=True),
                    sa.Column("action_id", sa.Integer(), nullable=True),
                    sa.Column("created_at", TS, nullable=False),
                    sa.UniqueConstraint("pool_id", "knob", "version"))
    op.create_index("ix_knob_versions_pool_id", "knob_versions", ["pool_id"])
    for knob, name, value in OLD_TABLES:
        old = _old_table(name, value)
        op.execute(sa.insert(knob_versions).from_select(
            ["knob", "value", *COLUMNS], sa.select(sa.literal(knob), old.c[value], *(old.c[c] for c in COLUMNS))))
        op.drop_index(f"ix_{name}_pool_id", table_name=name)
        op.drop_table(name)


def downgrade() -> None:
    for knob, name, value in OLD_TABLES:
        op.create_table(name, sa.Column("id", sa.Integer(), primary_key=True),
                        sa.Column("pool_id", sa.Integer(), sa.ForeignKey("pools.id", ondelete="CASCADE"),
                                  nullable=False),
                        sa.Column("version", sa.Integer(), nullable=False),
                        sa.Column(value, sa.Integer(), nullable=True),
                        sa.Column("action_id", sa.Integer(), nullable=True),
                        sa.Column("created_at", TS, nullable=False),
                        sa.UniqueConstraint("pool_id", "version"))
        op.create_index(f"ix_{name}_pool_id", name, ["pool_id"])
        rows = knob_versions
        op.execute(sa.insert(_old_table(name, value)).from_select(
            [value, *COLUMNS], sa.select(rows.c.value, *(rows.c[c] for c in COLUMNS)).where(rows.c.knob == knob)))
    op.drop_index("ix_knob_versions_pool_id", table_name="knob_versions")
    op.drop_table("knob_versions")
