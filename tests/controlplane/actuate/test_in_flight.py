"""The one rule every trigger meets: one action in flight per pool and knob."""

from __future__ import annotations

import pytest
from support.store import make_pool

from controlplane.actuate import change
from controlplane.actuate.in_flight import in_flight, join
from controlplane.desired import Mode, Policy, VerifyOutcome
from controlplane.store import actions
from controlplane.store.knobs import PLACEMENT, ROUTING

NOW = 1_800_000_000.0
WINDOW = 10.0


def propose_routing(session, deployment, pool, mode: Mode, *, now: float = NOW):
    return change.propose(session, ROUTING, pool, 1, actions.Entry("test", predicted={"topk_group_after": 1}),
                          policy=Policy(mode=mode), now=now)


def flying(session, pool, *, now: float, cooldown: float = 60.0, kind: str = ROUTING.kind):
    return in_flight(session, pool, kind, policy=Policy(cooldown_seconds=cooldown), window_seconds=WINDOW, now=now)


@pytest.mark.parametrize("mode", [Mode.observe, Mode.auto])
def test_a_planned_or_applied_change_is_in_flight_for_the_cooldown(sessions, mode):
    with sessions() as session, session.begin():
        deployment, pool = make_pool(session, now=NOW)
        action = propose_routing(session, deployment, pool, mode)
        assert flying(session, pool, now=NOW + 59) is action
        assert flying(session, pool, now=NOW + 61) is None
        assert flying(session, pool, now=NOW + 9, cooldown=0) is action  # at least one window
        assert flying(session, pool, now=NOW + 11, cooldown=0) is None


def test_a_proposal_waiting_for_a_person_is_in_flight_until_decided(sessions):
    with sessions() as session, session.begin():
        deployment, pool = make_pool(session, now=NOW)
        waiting = propose_routing(session, deployment, pool, Mode.approve)
        assert flying(session, pool, now=NOW + 86_400) is waiting
        change.reject(ROUTING, action=waiting, rejected_by="bob", now=NOW + 86_400)
        assert flying(session, pool, now=NOW + 86_400) is None


def test_a_settled_change_and_another_knob_are_not_in_flight(sessions):
    with sessions() as session, session.begin():
        deployment, pool = make_pool(session, now=NOW)
        action = propose_routing(session, deployment, pool, Mode.auto)
        assert flying(session, pool, now=NOW + 1, kind=PLACEMENT.kind) is None
        change.settle(session, ROUTING, pool=pool, action=action, outcome=VerifyOutcome.verified, measured={},
                      now=NOW + 1)
        assert flying(session, pool, now=NOW + 1) is None
        _, other = make_pool(session, now=NOW, role="prefill")
        propose_routing(session, deployment, other, Mode.auto)
        assert flying(session, pool, now=NOW + 1) is None  # per pool


def test_a_request_joining_adds_its_alerts(sessions):
    with sessions() as session, session.begin():
        deployment, pool = make_pool(session, now=NOW)
        action = propose_routing(session, deployment, pool, Mode.auto)
        join(action, alerts=[{"fingerprint": "a"}], now=NOW + 1)
        join(action, alerts=[], now=NOW + 2)
        join(action, alerts=[{"fingerprint": "b"}], now=NOW + 3)
        assert [a["fingerprint"] for a in action.alerts] == ["a", "b"]
