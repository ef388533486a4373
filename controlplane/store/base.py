"""The declarative base of the store's tables: its metadata is the schema. Arrays are stored as .npy bytes
(`store.arrays`), counters as columns.

The tables are in controlplane/store/tables.py (the fleet and what moectl decided) and
controlplane/store/observed_tables.py (what agents and routers reported); importing tables.py imports both, so
`Base.metadata` is whole from there. Migrations in top-level `migrations/` must match it
(`tests/controlplane/store/test_migrations.py` runs alembic's autogenerate comparison).
"""

from __future__ import annotations

from sqlalchemy.orm import DeclarativeBase


class Base(DeclarativeBase):
    pass
