"""The controller's engine on PostgreSQL: a transaction left idle past its bound (its replica paused while
holding a pool's lock) is ended by the server, so the pool's other writers go on; unbounded, they wait."""

from __future__ import annotations

import time
import uuid

import pytest
from sqlalchemy.exc import DBAPIError, OperationalError
from support import servers
from support.store import make_pool

from controlplane.store import deployments
from controlplane.store.db import is_unavailable, make_engine, make_sessions, upgrade
from controlplane.store.tables import Pool

IDLE_SECONDS = 0.5
TIMEOUT_SECONDS = 1.0  # lock_timeout: how long the second writer waits


@pytest.fixture
def url(postgres_server) -> str:
    url = servers.create_database(*postgres_server, f"t{uuid.uuid4().hex[:12]}")
    upgrade(url)
    return url


def held_then_taken(url: str, idle: float | None) -> tuple[bool, bool]:
    """A session locks the pool and goes idle past IDLE_SECONDS; another then takes the lock. Returns (whether
    the other took it, whether the idle session's next statement failed as the database being unavailable:
the API answers 503, the loop retries)."""
    paused_engine = make_engine(url, timeout_seconds=TIMEOUT_SECONDS, max_idle_in_transaction_seconds=idle)
    other_engine = make_engine(url, timeout_seconds=TIMEOUT_SECONDS)
    paused, other = make_sessions(paused_engine), make_sessions(other_engine)
    with other() as session, session.begin():
        _, pool = make_pool(session, now=0.0)
    try:
        with paused() as held:
            held.begin()
            deployments.lock_pool(held, held.get(Pool, pool.id))
            time.sleep(IDLE_SECONDS * 3)  # paused: no statement, the transaction open
            try:
                with other() as session, session.begin():
                    deployments.lock_pool(session, session.get(Pool, pool.id))
                is_taken = True
            except OperationalError:  # lock_timeout
                is_taken = False
            try:
                held.get(Pool, pool.id, populate_existing=True)
                held.commit()
                is_ended = False
            except DBAPIError as ended:  # psycopg: IdleInTransactionSessionTimeout, an InternalError
                is_ended = is_unavailable(ended)
        return is_taken, is_ended
    finally:
        paused_engine.dispose()
        other_engine.dispose()


@pytest.mark.postgres
def test_a_transaction_idle_past_its_bound_is_ended_and_its_locks_released(url):
    assert held_then_taken(url, IDLE_SECONDS) == (True, True)


@pytest.mark.postgres
def test_without_the_bound_the_idle_transaction_holds_its_lock(url):
    assert held_then_taken(url, None) == (False, False)
