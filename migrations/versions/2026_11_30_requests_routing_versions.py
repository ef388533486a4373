"""requests (what triggers ask of a pool), routing limits versioned per pool like placements,
actions name the version of their knob they made

Revision ID: 2026_11_30_requests
Revises: 2026_11_29_tokens_alerts
Create Date: 2026-11-30
"""

from datetime import UTC, datetime

import sqlalchemy as sa
from alembic import op

revision = "2026_11_30_requests"
down_revision = "2026_11_29_tokens_alerts"
branch_labels = None
depends_on = None

TS = sa.DateTime(timezone=True)
pools = sa.table("pools", sa.column("id", sa.Integer()), sa.column("created_at", TS),
                 sa.column("topk_group", sa.Integer()), sa.column("routing_changed_at", sa.Float()))
routing_limits = sa.table("routing_limits", sa.column("pool_id", sa.Integer()), sa.column("version", sa.Integer()),
                          sa.column("topk_group", sa.Integer()), sa.column("action_id", sa.Integer()),
                          sa.column("created_at", TS))
actions = sa.table("actions", sa.column("id", sa.Integer()), sa.column("pool_id", sa.Integer()),
                   sa.column("kind", sa.String()), sa.column("status", sa.String()),
                   sa.column("inputs", sa.JSON()), sa.column("based_on_version", sa.Integer()))


def _seconds(moment: datetime) -> float:
    return (moment if moment.tzinfo else moment.replace(tzinfo=UTC)).timestamp()


def upgrade() -> None:
    op.create_table("routing_limits", sa.Column("id", sa.Integer(), primary_key=True),
                    sa.Column("pool_id", sa.Integer(), sa.ForeignKey("pools.id", ondelete="CASCADE"), nullable=False),
                    sa.Column("version", sa.Integer(), nullable=False),
                    sa.Column("topk_group", sa.Integer(), nullable=True),
                    sa.Column("action_id", sa.Integer(), nullable=True),
                    sa.Column("created_at", TS, nullable=False),
                    sa.UniqueConstraint("pool_id", "version"))
    op.create_index("ix_routing_limits_pool_id", "routing_limits", ["pool_id"])
    op.create_table("requests", sa.Column("id", sa.Integer(), primary_key=True),
                    sa.Column("pool_id", sa.Integer(), sa.ForeignKey("pools.id", ondelete="CASCADE"), nullable=False),
                    sa.Column("knob", sa.String(32), nullable=False),
                    sa.Column("trigger", sa.String(16), nullable=False),
                    sa.Column("created_by", sa.String(128), nullable=False),
                    sa.Column("alerts", sa.JSON(), nullable=False),
                    sa.Column("created_at", TS, nullable=False),
                    sa.Column("handled_at", TS, nullable=True),
                    sa.Column("action_id", sa.Integer(), nullable=True),
                    sa.Column("outcome", sa.Text(), nullable=False))
    op.create_index("ix_requests_pool_id", "requests", ["pool_id"])
    _routing_columns_to_versions()
    with op.batch_alter_table("actions") as batch:
        batch.alter_column("placement_version", new_column_name="version", existing_type=sa.Integer(),
                           existing_nullable=True)
    with op.batch_alter_table("pools") as batch:
        batch.drop_column("routing_changed_at")
        batch.drop_column("topk_group")


def _routing_columns_to_versions() -> None:
    """Each pool gets version 0 (no limit); a pool whose limit was ever changed gets version 1 holding it,
    made by its last applied routing action. A routing proposal planned against the limit in force is
    planned against that version (it was compared by value before)."""
    bind = op.get_bind()
    for pool in bind.execute(sa.select(pools)).all():
        rows = [{"pool_id": pool.id, "version": 0, "topk_group": None, "action_id": None,
                 "created_at": pool.created_at}]
        if pool.topk_group is not None or pool.routing_changed_at is not None:
            made_by = bind.scalar(sa.select(sa.func.max(actions.c.id)).where(
                actions.c.pool_id == pool.id, actions.c.kind == "routing",
                actions.c.status.in_(("applied", "verified"))))
            changed_at = pool.routing_changed_at
            rows.append({"pool_id": pool.id, "version": 1, "topk_group": pool.topk_group, "action_id": made_by,
                         "created_at": datetime.fromtimestamp(changed_at, UTC) if changed_at else pool.created_at})
        op.bulk_insert(routing_limits, rows)
        waiting = bind.execute(sa.select(actions.c.id, actions.c.inputs).where(
            actions.c.pool_id == pool.id, actions.c.kind == "routing", actions.c.status == "awaiting_approval"))
        for action in waiting.all():
            if (action.inputs or {}).get("topk_group") == pool.topk_group:
                bind.execute(sa.update(actions).where(actions.c.id == action.id)
                             .values(based_on_version=len(rows) - 1))


def downgrade() -> None:
    with op.batch_alter_table("pools") as batch:
        batch.add_column(sa.Column("topk_group", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("routing_changed_at", sa.Float(), nullable=True))
    bind = op.get_bind()
    latest = (sa.select(routing_limits.c.pool_id, sa.func.max(routing_limits.c.version).label("version"))
              .group_by(routing_limits.c.pool_id).subquery())
    rows = bind.execute(sa.select(routing_limits).join(latest, sa.and_(
        routing_limits.c.pool_id == latest.c.pool_id, routing_limits.c.version == latest.c.version))).all()
    for row in rows:
        if row.version > 0:
            bind.execute(sa.update(pools).where(pools.c.id == row.pool_id).values(
                topk_group=row.topk_group, routing_changed_at=_seconds(row.created_at)))
    with op.batch_alter_table("actions") as batch:
        batch.alter_column("version", new_column_name="placement_version", existing_type=sa.Integer(),
                           existing_nullable=True)
    placement_version = sa.table("actions", sa.column("kind", sa.String()),
                                 sa.column("placement_version", sa.Integer()))
    bind.execute(sa.update(placement_version).where(placement_version.c.kind != "placement")
                 .values(placement_version=None))
    op.drop_table("requests")
    op.drop_table("routing_limits")
