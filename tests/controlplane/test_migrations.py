"""Alembic: upgrade -> downgrade -> upgrade works, and the migrations match the tables."""

from __future__ import annotations

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import create_engine, inspect

from controlplane.store.db import downgrade, upgrade
from controlplane.store.tables import Base

TABLES = {"deployments", "pools", "agents", "load_windows", "placements", "routing_limits", "policies", "actions",
          "requests", "tokens", "alert_events"}


def tables(url: str) -> set[str]:
    engine = create_engine(url)
    try:
        return set(inspect(engine).get_table_names()) - {"alembic_version"}
    finally:
        engine.dispose()


def test_upgrade_downgrade_upgrade(database_url):
    upgrade(database_url)
    assert tables(database_url) == TABLES
    downgrade(database_url)
    assert tables(database_url) == set()
    upgrade(database_url)
    assert tables(database_url) == TABLES


def test_migrations_match_the_models(database_url):
    upgrade(database_url)
    engine = create_engine(database_url)
    with engine.connect() as conn:
        diff = compare_metadata(MigrationContext.configure(conn), Base.metadata)
    engine.dispose()
    assert diff == []
