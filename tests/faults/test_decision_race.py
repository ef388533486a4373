"""People deciding one proposal at once, over real HTTP against a real server: exactly one decision wins,
on SQLite and on PostgreSQL; the others get 409, never a 500, and nothing is applied twice."""

from __future__ import annotations

import httpx
import numpy as np
import pytest
from support.auth import operator
from support.live import at_once, running_controller
from support.store import make_pool

from agents.protocol.placement import PlacementTable
from controlplane.actuate import change
from controlplane.desired import Policy
from controlplane.store import actions
from controlplane.store.knobs import PLACEMENT
from controlplane.store.tables import Action, Deployment, Pool

NUM_ROUNDS = 8
NUM_APPROVERS = 6
APPROVE = Policy(mode="approve")


def propose(sessions, now: float) -> int:
    """A proposal awaiting approval on pool 'decode' of 'tiny', planned against the version in force."""
    with sessions() as session, session.begin():
        deployment = session.query(Deployment).filter_by(name="tiny").one_or_none()
        pool = session.query(Pool).filter_by(role="decode").one_or_none() if deployment else None
        if pool is None:
            deployment, pool = make_pool(session, now=now, policy=APPROVE)
        table = np.roll(PLACEMENT.versions.latest(session, pool).value.slot_to_expert, 1, axis=1)
        action = change.propose(session, PLACEMENT, pool, PlacementTable(table),
                                actions.Entry("race", trigger="manual", created_by="test"), policy=APPROVE, now=now)
        assert action.status == actions.AWAITING_APPROVAL
        return action.id


def state(sessions, action_id: int) -> tuple[str, int]:
    """(the action's status, the pool's latest placement version)."""
    with sessions() as session:
        action = session.get(Action, action_id)
        return action.status, PLACEMENT.versions.latest(session, session.get(Pool, action.pool_id)).version


@pytest.mark.slow
def test_approve_and_reject_at_once_one_wins_the_other_gets_409(settings, sessions, clock):
    outcomes = []
    with running_controller(settings) as controller, \
            httpx.Client(base_url=controller.url, headers=operator(), timeout=30) as http:
        for _ in range(NUM_ROUNDS):
            action_id = propose(sessions, clock.now)
            _, version_before = state(sessions, action_id)
            decisions = ("approve", "reject")
            codes = at_once(lambda i: http.post(f"/v1/actions/{action_id}/{decisions[i]}").status_code,  # noqa: B023
                            2, num_threads=2)
            status, version = state(sessions, action_id)
            outcomes.append((tuple(codes), status, version - version_before))
    winners = [dict(zip(codes, ("approve", "reject"), strict=True)).get(200) for codes, _, _ in outcomes]
    expected = [("applied", 1) if w == "approve" else ("rejected", 0) for w in winners]
    assert all(sorted(codes) == [200, 409] for codes, _, _ in outcomes), outcomes
    assert [(status, issued) for _, status, issued in outcomes] == expected, outcomes


@pytest.mark.slow
def test_six_approvals_at_once_apply_once(settings, sessions, clock):
    results = []
    with running_controller(settings) as controller, \
            httpx.Client(base_url=controller.url, headers=operator(), timeout=30) as http:
        for _ in range(3):
            action_id = propose(sessions, clock.now)
            _, version_before = state(sessions, action_id)
            codes = at_once(lambda _: http.post(f"/v1/actions/{action_id}/approve").status_code,  # noqa: B023
                            NUM_APPROVERS, num_threads=NUM_APPROVERS)
            status, version = state(sessions, action_id)
            results.append((sorted(codes), status, version - version_before))
    assert results == [([200] + [409] * (NUM_APPROVERS - 1), "applied", 1)] * 3, results
