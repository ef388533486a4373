"""Requests: recorded by triggers, pending per pool and knob until a reconcile settles them."""

from __future__ import annotations

from sqlalchemy import func, select
from support.store import make_pool

from controlplane.store import requests
from controlplane.store.requests import Ask
from controlplane.store.tables import Pool, Request

NOW = 1_800_000_000.0


def test_pending_requests_are_per_pool_and_knob_oldest_first(sessions):
    with sessions() as session, session.begin():
        _, pool = make_pool(session, now=NOW)
        _, other = make_pool(session, now=NOW, role="prefill")
        first = requests.record(session, pool, Ask("placement", "alert", "am", alerts=({"fingerprint": "a"},)), now=NOW)
        second = requests.record(session, pool, Ask("placement", "manual", "bob"), now=NOW)
        size = requests.record(session, pool, Ask("replicas", "manual", "bob"), now=NOW)
        requests.record(session, other, Ask("placement", "manual", "bob"), now=NOW)
        assert requests.pending(session, pool) == [first, second, size]  # every knob's
        assert requests.pending(session, pool, knob="placement") == [first, second]
        assert first.alerts == [{"fingerprint": "a"}] and second.alerts == [] and second.outcome == ""
        requests.settle(first, outcome="action 7 applied", action_id=7, now=NOW + 1)
        assert requests.pending(session, pool, knob="placement") == [second]
    with sessions() as session:  # what was settled is stored
        stored = session.get(Request, first.id)
        assert (stored.outcome, stored.action_id, stored.handled_at is not None) == ("action 7 applied", 7, True)


def test_a_pools_requests_go_with_it(sessions):
    with sessions() as session, session.begin():
        _, pool = make_pool(session, now=NOW)
        requests.record(session, pool, Ask("placement", "manual", "bob"), now=NOW)
    with sessions() as session, session.begin():
        session.delete(session.get(Pool, pool.id))
    with sessions() as session:
        assert session.scalar(select(func.count()).select_from(Request)) == 0
