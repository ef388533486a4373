"""Leader election through the database, on SQLite and PostgreSQL: who leads, when a leader is replaced
(on the candidate's own clock), that a leader stops trusting itself before anyone may replace it, and that
a replica that lost the leadership commits nothing (the fence)."""

from __future__ import annotations

import time
import uuid

import pytest
from sqlalchemy import func, select
from sqlalchemy.exc import DBAPIError
from support.clock import Clock
from support.servers import create_database
from support.store import make_pool

from controlplane.actuate.fence import NotLeader, guard
from controlplane.config import Settings
from controlplane.desired import Policy
from controlplane.leader.database import DatabaseRecords
from controlplane.leader.elector import Elector, LeaderRecord
from controlplane.loop.reconcile import Reconciler
from controlplane.store import actions, requests
from controlplane.store.db import make_engine, make_sessions, upgrade
from controlplane.store.knobs import POOL_SIZE
from controlplane.store.tables import Action, Request

LEASE, RENEW = 10.0, 6.0
NOW = 1_800_000_000.0


def elector(sessions, identity: str, clock: Clock) -> Elector:
    return Elector(DatabaseRecords(sessions, lease_seconds=LEASE), identity=identity, lease_seconds=LEASE,
                   renew_seconds=RENEW, clock=clock)


@pytest.fixture
def clocks():
    return Clock(100.0), Clock(100.0)


def take_over(b: Elector, clock: Clock) -> None:
    """b replaces a leader that stopped renewing: it must see the record unchanged for the lease first."""
    assert not b.campaign()
    clock.now += LEASE + 0.1
    assert b.campaign()


def test_the_first_candidate_leads_and_the_next_waits_out_the_lease(sessions, clocks):
    ca, cb = clocks
    a, b = elector(sessions, "a", ca), elector(sessions, "b", cb)
    assert a.campaign() and a.token == "a#0" and a.is_leading()
    assert not b.campaign() and not b.is_leading() and b.token is None
    cb.now += LEASE - 1
    ca.now += LEASE - 1
    assert a.campaign()  # renewed: the record changed, b's wait starts again
    cb.now += 2
    assert not b.campaign()
    cb.now += LEASE - 0.5
    assert not b.campaign()
    cb.now += 1
    assert b.campaign() and b.token == "b#1"
    with pytest.raises(NotLeader, match="passed from a .term 0. to b .term 1."):
        a.check()
    assert not a.is_leading() and not a.campaign()


def test_a_leader_stops_trusting_itself_before_anyone_may_replace_it(sessions, clocks):
    ca, _ = clocks
    a = elector(sessions, "a", ca)
    assert a.campaign()
    ca.now += RENEW - 0.1
    a.check()
    ca.now += 0.2
    assert not a.is_leading()
    with pytest.raises(NotLeader, match="no renewal"):
        a.check()
    assert a.campaign() and a.token == "a#0"  # nobody took it: renewed, same term


def test_a_released_leadership_is_taken_at_once(sessions, clocks):
    ca, cb = clocks
    a, b = elector(sessions, "a", ca), elector(sessions, "b", cb)
    assert a.campaign() and not b.campaign()
    a.release()
    assert not a.is_leading() and b.campaign() and b.token == "b#1"


def test_compare_and_set_lets_one_of_two_candidates_win(sessions):
    records = DatabaseRecords(sessions, lease_seconds=LEASE)
    assert records.create(LeaderRecord("a", 0, LEASE, NOW)) and not records.create(LeaderRecord("b", 0, LEASE, NOW))
    stale = records.read()
    assert records.replace(stale, LeaderRecord("b", 1, LEASE, NOW + 20))
    assert not records.replace(stale, LeaderRecord("c", 1, LEASE, NOW + 20))
    assert records.read() == LeaderRecord("b", 1, LEASE, NOW + 20)


def count(sessions, row) -> int:
    with sessions() as session:
        return session.scalar(select(func.count()).select_from(row))


def test_a_guarded_commit_carries_the_leader_and_one_that_lost_it_writes_nothing(sessions, clocks):
    ca, cb = clocks
    a, b = elector(sessions, "a", ca), elector(sessions, "b", cb)
    assert a.campaign()
    with sessions() as session, session.begin():
        deployment, pool = make_pool(session, now=NOW)
    with sessions() as session, session.begin():
        guard(session, a)
        made = actions.record(session, pool, actions.Entry(""), kind="diagnosis", mode="auto",
                              status=actions.RECORDED, now=NOW)
    assert made.leader == "a#0" and count(sessions, Action) == 1
    with sessions() as session:
        guard(session, a)
        with pytest.raises(NotLeader), session.begin():
            take_over(b, cb)  # while a's transaction is open, before it wrote
            actions.record(session, pool, actions.Entry(""), kind="diagnosis", mode="auto", status=actions.RECORDED,
                           now=NOW)
    assert count(sessions, Action) == 1


def test_only_the_leader_reconciles(sessions, settings, clocks):
    ca, cb = clocks
    a, b = elector(sessions, "a", ca), elector(sessions, "b", cb)
    assert a.campaign() and not b.campaign()
    with sessions() as session, session.begin():
        _, pool = make_pool(session, now=NOW, policy=Policy(mode="auto"))
        requests.record(session, pool, requests.Ask(POOL_SIZE.kind, "manual", "alice", value={"replicas": 2}), now=NOW)
    assert Reconciler(settings, fence=b).run_pass(sessions, now=NOW).plans == []
    assert count(sessions, Action) == 0
    result = Reconciler(settings, fence=a).run_pass(sessions, now=NOW)
    assert len(result.plans) == 1 and result.num_errors == 0
    with sessions() as session:
        [made] = session.scalars(select(Action)).all()
        assert (made.kind, made.status, made.leader) == ("pool_size", "applied", "a#0")
        assert session.scalar(select(Request.handled_at)) is not None


@pytest.mark.postgres
def test_a_leader_paused_inside_a_fenced_transaction_holds_a_takeover_off_for_one_lease_only(postgres_server):
    """The fence locks the row until its transaction ends; a paused leader's session is ended by PostgreSQL
    after one lease, so the takeover goes through and the paused transaction commits nothing."""
    url = create_database(*postgres_server, f"t{uuid.uuid4().hex[:12]}")
    upgrade(url)
    engine = make_engine(url, timeout_seconds=Settings(database_url=url).db_timeout_seconds)
    sessions = make_sessions(engine)
    ca, cb = Clock(100.0), Clock(100.0)
    a, b = (Elector(DatabaseRecords(sessions, lease_seconds=1.0), identity=name, lease_seconds=1.0,
                    renew_seconds=0.5, clock=clock) for name, clock in (("a", ca), ("b", cb)))
    assert a.campaign() and not b.campaign()
    paused = sessions()
    paused.begin()
    a.check(paused)  # the row is locked until this transaction ends: a "pauses" here
    cb.now += 1.1
    started = time.monotonic()
    assert b.campaign() and b.token == "b#1"  # waited for PostgreSQL to end a's idle transaction
    assert 0.9 <= time.monotonic() - started < 10
    with pytest.raises(DBAPIError, match="idle-in-transaction timeout"):
        paused.commit()
    paused.close()
    engine.dispose()
