"""Alembic: upgrade -> downgrade -> upgrade works, and the migrations match the tables."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import DateTime, create_engine, inspect, text
from sqlalchemy.exc import IntegrityError

from controlplane.store.db import downgrade, upgrade
from controlplane.store.tables import Base
from controlplane.store.timestamps import seconds

TABLES = {"deployments", "pools", "agents", "load_windows", "placements", "knob_versions", "policies", "actions",
          "requests", "tokens", "alert_events", "leaders", "knob_parks", "audit_events", "replica_windows",
          "router_windows", "pool_plans", "change_costs"}
# the last revision with a table per scalar knob (routing_limits, pool_sizes, prefill_thresholds)
BEFORE_KNOB_VERSIONS = "2026_12_03_deployment_engine"
KNOB_VERSIONS = "2026_12_04_knob_versions"
TS = DateTime(timezone=True)


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


def test_routing_limit_columns_become_versions_and_come_back(database_url):
    """The routing limit was a column on pools; it becomes version 1 of the pool's routing limits, made
    by the routing action that applied it, and a downgrade puts it back."""
    before = "2026_11_29_tokens_alerts"
    upgrade(database_url, before)
    created, changed_at = datetime(2026, 11, 1, tzinfo=UTC), 1_800_000_000.5
    engine = create_engine(database_url)
    with engine.begin() as conn:
        conn.execute(text("INSERT INTO deployments (id, name, model, created_at) VALUES (1, 'd', '{}', :t)"),
                     {"t": created})
        for pool_id, role, topk_group, at in [(1, "decode", 3, changed_at), (2, "prefill", None, None)]:
            conn.execute(text("INSERT INTO pools (id, deployment_id, role, ep_size, slots_per_rank, gpus_per_node,"
                              " created_at, topk_group, routing_changed_at) VALUES (:id, 1, :role, 2, 2, 8, :t, :k,"
                              " :at)"), {"id": pool_id, "role": role, "t": created, "k": topk_group, "at": at})
        for action_id, kind, status, topk_group, version in [(1, "routing", "verified", None, None),
                                                              (2, "routing", "awaiting_approval", 3, None),
                                                              (3, "placement", "applied", None, 1)]:
            conn.execute(text("INSERT INTO actions (id, deployment_id, pool_id, kind, trigger, mode, status, reason,"
                              " inputs, predicted, measured, placement_version, created_by, created_at, updated_at)"
                              " VALUES (:id, 1, 1, :kind, 'loop', 'auto', :status, '', :inputs, '{}', '{}', :v,"
                              " 'loop', :t, :t)"), {"id": action_id, "kind": kind, "status": status, "v": version,
                                                    "inputs": json.dumps({"topk_group": topk_group}), "t": created})
    upgrade(database_url, BEFORE_KNOB_VERSIONS)
    with engine.connect() as conn:
        versions = conn.execute(text("SELECT pool_id, version, topk_group, action_id, created_at FROM routing_limits"
                                     " ORDER BY pool_id, version").columns(created_at=TS)).all()
        actions = dict(conn.execute(text("SELECT id, version FROM actions")).all())
        based_on = conn.scalar(text("SELECT based_on_version FROM actions WHERE id = 2"))
    assert [v[:4] for v in versions] == [(1, 0, None, None), (1, 1, 3, 1), (2, 0, None, None)]
    assert seconds(versions[1][4]) == changed_at
    assert actions == {1: None, 2: None, 3: 1} and based_on == 1  # the proposal was planned against v1
    downgrade(database_url, before)
    with engine.connect() as conn:
        pools = conn.execute(text("SELECT id, topk_group, routing_changed_at FROM pools ORDER BY id")).all()
        actions = dict(conn.execute(text("SELECT id, placement_version FROM actions")).all())
    engine.dispose()
    assert [tuple(p) for p in pools] == [(1, 3, changed_at), (2, None, None)]
    assert actions == {1: None, 2: None, 3: 1}


def test_token_names_are_unique_among_active_tokens_and_a_downgrade_keeps_every_token(database_url):
    """Upgraded, a revoked token's name can be taken again (two active tokens still cannot share one);
    downgraded, names are unique again: revoked tokens sharing a name are renamed, none dropped."""
    upgrade(database_url)
    engine = create_engine(database_url)
    insert = text("INSERT INTO tokens (id, name, role, secret_sha256, prefix, created_by, created_at, revoked_at) "
                  "VALUES (:id, :name, 'viewer', :secret, 'p', 'test', :t, :revoked)")
    created = datetime(2026, 12, 1, tzinfo=UTC)
    with engine.begin() as conn:
        for token_id, name, revoked in [(1, "alice", created), (2, "alice", None), (3, "bob", created),
                                        (4, "bob", created)]:
            conn.execute(insert, {"id": token_id, "name": name, "secret": f"s{token_id}", "t": created,
                                  "revoked": revoked})
    with pytest.raises(IntegrityError), engine.begin() as conn:
        conn.execute(insert, {"id": 5, "name": "alice", "secret": "s5", "t": created, "revoked": None})
    downgrade(database_url, "2026_11_30_pool_sizes")
    with engine.connect() as conn:
        names = dict(conn.execute(text("SELECT id, name FROM tokens")).all())
        columns = {c["name"] for c in inspect(conn).get_columns("requests")}
    assert names == {1: "alice~revoked-1", 2: "alice", 3: "bob~revoked-3", 4: "bob"}
    assert "alert_event_id" not in columns
    with pytest.raises(IntegrityError), engine.begin() as conn:  # unique again, as before
        conn.execute(insert, {"id": 5, "name": "bob", "secret": "s5", "t": created, "revoked": created})
    upgrade(database_url)
    engine.dispose()


def test_pools_get_pool_size_version_0_and_a_downgrade_supersedes_waiting_size_proposals(database_url):
    """Existing pools start unsized (version 0, as a new pool does); a pool-size proposal waiting for a person
    cannot be approved by the code before the knob existed, so a downgrade supersedes it."""
    before = "2026_11_30_requests"
    upgrade(database_url, before)
    created = datetime(2026, 11, 1, tzinfo=UTC)
    engine = create_engine(database_url)
    with engine.begin() as conn:
        conn.execute(text("INSERT INTO deployments (id, name, model, created_at) VALUES (1, 'd', '{}', :t)"),
                     {"t": created})
        for pool_id, role in [(1, "decode"), (2, "prefill")]:
            conn.execute(text("INSERT INTO pools (id, deployment_id, role, ep_size, slots_per_rank, gpus_per_node,"
                              " created_at) VALUES (:id, 1, :role, 2, 2, 8, :t)"), {"id": pool_id, "role": role,
                                                                                   "t": created})
    upgrade(database_url, BEFORE_KNOB_VERSIONS)
    with engine.begin() as conn:
        sizes = conn.execute(text("SELECT pool_id, version, replicas, action_id FROM pool_sizes ORDER BY pool_id"))
        assert [tuple(s) for s in sizes] == [(1, 0, None, None), (2, 0, None, None)]
        for action_id, kind in [(1, "pool_size"), (2, "placement")]:
            conn.execute(text("INSERT INTO actions (id, deployment_id, pool_id, kind, trigger, mode, status, reason,"
                              " inputs, predicted, measured, created_by, created_at, updated_at, leader) VALUES (:id,"
                              " 1, 1, :kind, 'manual', 'approve', 'awaiting_approval', '', '{}', '{}', '{}', 'alice',"
                              " :t, :t, 'a#1')"), {"id": action_id, "kind": kind, "t": created})
    downgrade(database_url, before)
    with engine.connect() as conn:
        statuses = dict(conn.execute(text("SELECT id, status FROM actions")).all())
    engine.dispose()
    assert statuses == {1: "superseded", 2: "awaiting_approval"}


def test_the_scalar_knobs_versions_move_into_one_table_and_back(database_url):
    """Each scalar knob's versions (routing limit, pool size, local-prefill threshold) become rows of
    knob_versions named by the knob, with their value, action and time; a downgrade puts each back in its own
    table, and a version written after the upgrade goes back with them."""
    upgrade(database_url, BEFORE_KNOB_VERSIONS)
    created, changed = datetime(2026, 11, 1, tzinfo=UTC), datetime(2026, 12, 1, 8, 0, 0, 500000, tzinfo=UTC)
    engine = create_engine(database_url)
    old = {"routing_limits": ("routing", "topk_group", 3), "pool_sizes": ("pool_size", "replicas", 2),
           "prefill_thresholds": ("local_prefill_threshold", "tokens", 512)}
    with engine.begin() as conn:
        conn.execute(text("INSERT INTO deployments (id, name, model, created_at) VALUES (1, 'd', '{}', :t)"),
                     {"t": created})
        conn.execute(text("INSERT INTO pools (id, deployment_id, role, ep_size, slots_per_rank, gpus_per_node,"
                          " created_at) VALUES (1, 1, 'decode', 2, 2, 8, :t)"), {"t": created})
        for table, (_, column, value) in old.items():
            conn.execute(text(f"INSERT INTO {table} (pool_id, version, {column}, action_id, created_at) VALUES"
                              " (1, 0, NULL, NULL, :t), (1, 1, :v, 7, :at)"),
                         {"t": created, "v": value, "at": changed})
    upgrade(database_url, KNOB_VERSIONS)
    select_versions = text("SELECT knob, version, value, action_id, created_at FROM knob_versions"
                           " ORDER BY knob, version").columns(created_at=TS)
    with engine.begin() as conn:
        rows = [tuple(r[:4]) + (seconds(r[4]),) for r in conn.execute(select_versions)]
        conn.execute(text("INSERT INTO knob_versions (pool_id, knob, version, value, action_id, created_at) VALUES"
                          " (1, 'routing', 2, NULL, 8, :at)"), {"at": changed})
    made, moved = created.timestamp(), changed.timestamp()
    assert rows == sorted(row for knob, _, value in old.values()
                          for row in [(knob, 0, None, None, made), (knob, 1, value, 7, moved)])
    downgrade(database_url, BEFORE_KNOB_VERSIONS)
    with engine.connect() as conn:
        back = {table: [tuple(r) for r in conn.execute(text(f"SELECT version, {column}, action_id FROM {table}"
                                                             " ORDER BY version"))]
                for table, (_, column, _) in old.items()}
    engine.dispose()
    assert back == {"routing_limits": [(0, None, None), (1, 3, 7), (2, None, 8)],
                    "pool_sizes": [(0, None, None), (1, 2, 7)], "prefill_thresholds": [(0, None, None), (1, 512, 7)]}


def test_every_pool_gets_version_0_of_the_capacity_factor_and_a_downgrade_removes_it(database_url):
    """A pool made before the capacity factor holds its version 0 (no cap) after the upgrade, as a new pool
    does (store/deployments.py `create_pool`); the downgrade leaves the other knobs' versions as they were."""
    upgrade(database_url, KNOB_VERSIONS)
    created = datetime(2026, 11, 1, tzinfo=UTC)
    engine = create_engine(database_url)
    with engine.begin() as conn:
        conn.execute(text("INSERT INTO deployments (id, name, model, created_at) VALUES (1, 'd', '{}', :t)"),
                     {"t": created})
        for pool_id, role in ((1, "prefill"), (2, "decode")):
            conn.execute(text("INSERT INTO pools (id, deployment_id, role, ep_size, slots_per_rank, gpus_per_node,"
                              " created_at) VALUES (:id, 1, :role, 2, 2, 8, :t)"),
                         {"id": pool_id, "role": role, "t": created})
        conn.execute(text("INSERT INTO knob_versions (pool_id, knob, version, value, action_id, created_at) VALUES"
                          " (1, 'routing', 0, NULL, NULL, :t)"), {"t": created})
    upgrade(database_url)
    capacity = text("SELECT pool_id, version, value, created_at FROM knob_versions WHERE knob = 'expert_capacity'"
                    " ORDER BY pool_id").columns(created_at=TS)
    with engine.connect() as conn:
        assert [(r[0], r[1], r[2], seconds(r[3])) for r in conn.execute(capacity)] == [
            (1, 0, None, created.timestamp()), (2, 0, None, created.timestamp())]
    downgrade(database_url, KNOB_VERSIONS)
    with engine.connect() as conn:
        assert conn.execute(text("SELECT knob, pool_id FROM knob_versions")).all() == [("routing", 1)]
