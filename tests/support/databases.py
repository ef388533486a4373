"""Another database beside a test's own (SQLite: a file next to it; PostgreSQL: a database in the same
cluster), empty or a copy: what a controller restarted on a restored backup, or on a new database, sees."""

from __future__ import annotations

import sqlite3
import uuid

from sqlalchemy.engine import make_url


def sibling(url: str, *, copy: bool = False) -> str:
    """A new database next to `url`'s: empty, or with `url`'s contents (copy). Nothing may be writing `url`
    while it is copied; on PostgreSQL nothing may be connected to it (dispose its engines first)."""
    parsed = make_url(url)
    name = f"t{uuid.uuid4().hex[:12]}"
    if parsed.get_backend_name() == "sqlite":
        path = parsed.database.rsplit("/", 1)[0] + f"/{name}.db"
        if copy:
            with sqlite3.connect(parsed.database) as source, sqlite3.connect(path) as target:
                source.backup(target)  # the WAL's pages too, unlike copying the file
        return f"sqlite:///{path}"
    import psycopg

    host, port = parsed.query["host"], parsed.query["port"]
    template = f' TEMPLATE "{parsed.database}"' if copy else ""
    with psycopg.connect(host=host, port=port, user="postgres", dbname="postgres", autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"{template}')
    return parsed.set(database=name).render_as_string(hide_password=False)
