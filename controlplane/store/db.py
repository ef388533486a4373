"""Engine, sessions and schema migrations (Alembic, top-level `migrations/`)."""

from __future__ import annotations

import math
from pathlib import Path

from alembic import command
from alembic.config import Config
from sqlalchemy import Engine, create_engine, event, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError, OperationalError
from sqlalchemy.orm import Session, sessionmaker
from sqlalchemy.pool import NullPool

from controlplane.store.decoded import DECODED, WRITTEN, DecodedArrays, WrittenArrays

MIGRATIONS_DIR = Path(__file__).resolve().parents[2] / "migrations"
API_WORKER_THREADS = 40  # anyio's default thread limiter, where the API's handlers run
# a connection for each worker thread and the loop, so a request waits for a lock, never for a connection;
# 10 stay open when idle
POOL = {"pool_size": 10, "max_overflow": API_WORKER_THREADS + 5 - 10}


def _sqlite_path(url: str) -> Path | None:
    """The file of a SQLite URL (None for another database or an in-memory one)."""
    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite" or parsed.database in (None, "", ":memory:"):
        return None
    return Path(parsed.database)


def _ensure_directory(url: str) -> None:
    """SQLite creates the file but not its directory (the default, .moectl/moectl.db, is in one)."""
    path = _sqlite_path(url)
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)


def reset(url: str) -> None:
    """Clears the database (`moectl up --fresh`): a SQLite file is removed, with its WAL; any other
    database is migrated down to nothing (every migration is revertable)."""
    path = _sqlite_path(url)
    if path is None:
        downgrade(url, "base")
        return
    for suffix in ("", "-wal", "-shm"):
        path.with_name(path.name + suffix).unlink(missing_ok=True)


def make_engine(url: str, *, timeout_seconds: float, max_idle_in_transaction_seconds: float | None = None) -> Engine:
    """timeout_seconds bounds every wait on the database: a lock (SQLite's busy timeout, PostgreSQL's
    lock_timeout), a connection from the pool, a new connection. A request that would wait longer fails
    fast (the API answers 503 + Retry-After) instead of holding a connection long after its caller, an
    agent with a 5 s timeout, gave up.

    `max_idle_in_transaction_seconds` (PostgreSQL): the server ends a session that stays this long inside a
    transaction without a statement. That releases its locks, and nothing it had not committed is kept. A
    replica paused (or hung) while it holds a pool's lock would otherwise block every other writer of that
    pool, its successor as leader too, for as long as it is paused."""
    _ensure_directory(url)
    if url.startswith("sqlite"):
        engine = create_engine(url, pool_timeout=timeout_seconds, **POOL,
                               connect_args={"check_same_thread": False, "timeout": timeout_seconds})

        @event.listens_for(engine, "connect")
        def _sqlite_pragmas(conn, _record):  # noqa: ANN001
            # WAL lets the dashboard read while the loop writes; FKs make ondelete real. In WAL mode synchronous
            # NORMAL syncs at checkpoints, not at every commit: a crash of the process loses nothing, a power
            # loss at most the last commits, and never corrupts the file (every post is a commit: the sync was
            # ~5 ms of a DeepSeek-sized post)
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
            conn.execute("PRAGMA foreign_keys=ON")

        return engine
    connect_args = _postgres_timeouts(timeout_seconds)
    if max_idle_in_transaction_seconds is not None:
        idle = _milliseconds(max_idle_in_transaction_seconds)
        connect_args["options"] += f" -c idle_in_transaction_session_timeout={idle}"
    return create_engine(url, pool_pre_ping=True, pool_timeout=timeout_seconds, **POOL, connect_args=connect_args)


def make_probe_engine(url: str, *, timeout_seconds: float) -> Engine:
    """An engine for readiness probes: a fresh connection each time (no pool), so a probe never waits
    behind requests for a pooled connection and always sees whether the database answers now."""
    if url.startswith("sqlite"):
        return create_engine(url, poolclass=NullPool, connect_args={"timeout": timeout_seconds})
    timeouts = _postgres_timeouts(timeout_seconds)
    timeouts["options"] += f" -c statement_timeout={_milliseconds(timeout_seconds)}"
    return create_engine(url, poolclass=NullPool, connect_args=timeouts)


def is_ready(engine: Engine) -> str | None:
    """None when the database answers a read of the schema's version; else what went wrong."""
    try:
        with engine.connect() as conn:
            conn.execute(text("SELECT count(*) FROM alembic_version"))
    except Exception as exc:  # any failure is an answer: "not ready, because ..."
        return f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
    return None


def is_unavailable(exc: BaseException) -> bool:
    """The database itself failed (busy, unreachable, or it ended the session).

    Nothing of the transaction was stored, and a retry may succeed. psycopg reports a session ended for idling
    in a transaction as an InternalError on a connection SQLAlchemy then invalidates."""
    return isinstance(exc, OperationalError) or (isinstance(exc, DBAPIError) and exc.connection_invalidated)


def _postgres_timeouts(timeout_seconds: float) -> dict:
    # libpq's connect_timeout is whole seconds, at least 2
    return {"connect_timeout": max(2, math.ceil(timeout_seconds)),
            "options": f"-c lock_timeout={_milliseconds(timeout_seconds)}"}


def _milliseconds(seconds: float) -> int:
    return max(1, int(seconds * 1000))  # PostgreSQL's 0 would mean no limit


def make_sessions(engine: Engine) -> sessionmaker[Session]:
    """Sessions sharing one cache of decoded blobs and one of the window blobs this process wrote last
    (store/decoded.py)."""
    return sessionmaker(engine, expire_on_commit=False, info={DECODED: DecodedArrays(), WRITTEN: WrittenArrays()})


def alembic_config(url: str) -> Config:
    _ensure_directory(url)
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    config.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return config


def upgrade(url: str, revision: str = "head") -> None:
    command.upgrade(alembic_config(url), revision)


def downgrade(url: str, revision: str = "base") -> None:
    command.downgrade(alembic_config(url), revision)
