"""requests name the alert event that asked for them (what came of an alert is read from its requests);
a token name is unique among tokens not revoked (a revoked token's name can be given to a new token)

Revision ID: 2026_12_01_alert_requests
Revises: 2026_11_30_pool_sizes
Create Date: 2026-12-01
"""

import sqlalchemy as sa
from alembic import op

revision = "2026_12_01_alert_requests"
down_revision = "2026_11_30_pool_sizes"
branch_labels = None
depends_on = None

TS = sa.DateTime(timezone=True)
ACTIVE = sa.text("revoked_at IS NULL")
REVOKED_SUFFIX = "~revoked-"  # a downgrade renames revoked tokens that share a name: +this+id
tokens_rows = sa.table("tokens", sa.column("id", sa.Integer()), sa.column("name", sa.String()),
                       sa.column("revoked_at", TS))


def _tokens(*constraints: sa.Constraint) -> sa.Table:
    """The tokens table as SQLite holds it, but for the name's unique constraint, given here or not."""
    return sa.Table("tokens", sa.MetaData(), sa.Column("id", sa.Integer(), primary_key=True),
                    sa.Column("name", sa.String(128), nullable=False),
                    sa.Column("role", sa.String(16), nullable=False),
                    sa.Column("secret_sha256", sa.String(64), nullable=False, unique=True),
                    sa.Column("prefix", sa.String(12), nullable=False),
                    sa.Column("created_by", sa.String(128), nullable=False),
                    sa.Column("created_at", TS, nullable=False),
                    sa.Column("revoked_at", TS, nullable=True), *constraints)


def upgrade() -> None:
    with op.batch_alter_table("requests") as batch:
        batch.add_column(sa.Column("alert_event_id", sa.Integer(), nullable=True))
        batch.create_foreign_key("fk_requests_alert_event_id", "alert_events", ["alert_event_id"], ["id"],
                                 ondelete="SET NULL")
        batch.create_index("ix_requests_alert_event_id", ["alert_event_id"])
    if op.get_bind().dialect.name == "sqlite":  # its unique constraint has no name: the table is rebuilt without
        with op.batch_alter_table("tokens", copy_from=_tokens(), recreate="always"):
            pass
    else:
        op.drop_constraint("tokens_name_key", "tokens", type_="unique")
    op.create_index("ix_tokens_active_name", "tokens", ["name"], unique=True, sqlite_where=ACTIVE,
                    postgresql_where=ACTIVE)


def downgrade() -> None:
    op.drop_index("ix_tokens_active_name", "tokens")
    _rename_revoked_duplicates()
    if op.get_bind().dialect.name == "sqlite":
        with op.batch_alter_table("tokens", copy_from=_tokens(sa.UniqueConstraint("name")), recreate="always"):
            pass
    else:
        op.create_unique_constraint("tokens_name_key", "tokens", ["name"])
    with op.batch_alter_table("requests") as batch:
        batch.drop_index("ix_requests_alert_event_id")
        batch.drop_constraint("fk_requests_alert_event_id", type_="foreignkey")
        batch.drop_column("alert_event_id")


def _rename_revoked_duplicates() -> None:
    """Names must be unique again: a revoked token whose name another token has is renamed, kept."""
    bind = op.get_bind()
    rows = bind.execute(sa.select(tokens_rows).order_by(tokens_rows.c.revoked_at.is_(None).desc(),
                                                        tokens_rows.c.id.desc())).all()
    seen: set[str] = set()
    for row in rows:  # the active token (or the newest revoked one) keeps the name
        if row.name in seen:
            suffix = f"{REVOKED_SUFFIX}{row.id}"
            bind.execute(sa.update(tokens_rows).where(tokens_rows.c.id == row.id)
                         .values(name=row.name[:128 - len(suffix)] + suffix))
        seen.add(row.name)
