"""The one writer, on both knobs: what each mode does with a proposal, approval and supersession,
rejection, and the verdict on an applied change (rollback as a new version, or failed)."""

from __future__ import annotations

import numpy as np
import pytest
from sqlalchemy import func, select
from support.store import make_pool

from agents.protocol.placement import PlacementTable
from controlplane.actuate import change
from controlplane.desired import Mode, Policy, VerifyOutcome
from controlplane.store import actions
from controlplane.store.knobs import PLACEMENT, POOL_SIZE, ROUTING
from controlplane.store.tables import Action

NOW = 1_800_000_000.0
NUM_LAYERS, NUM_SLOTS = 2, 10


def table(seed: int) -> PlacementTable:
    """slot_to_expert [2, 10] with a slot_share."""
    rng = np.random.default_rng(seed)
    return PlacementTable(rng.integers(0, 8, (NUM_LAYERS, NUM_SLOTS)), rng.random((NUM_LAYERS, NUM_SLOTS)))


# per knob: two values unlike each other and unlike version 0, and how to tell values apart
KNOBS = {"placement": (PLACEMENT, table(1), table(2)), "routing": (ROUTING, 1, 2), "pool_size": (POOL_SIZE, 3, 5)}
PREDICTED = {ROUTING: "topk_group_after", POOL_SIZE: "replicas_after"}  # knobs whose proposal is the prediction


def same(a, b) -> bool:
    """Values alike, whatever version they were stored as."""
    if isinstance(a, PlacementTable):
        return np.array_equal(a.slot_to_expert, b.slot_to_expert) and np.array_equal(a.slot_share, b.slot_share)
    return a == b


def propose(session, knob, pool, deployment, value, mode: Mode, now: float = NOW):
    entry = actions.Entry("test", predicted={PREDICTED[knob]: value} if knob in PREDICTED else {}, trigger="manual",
                          created_by="alice")
    return change.propose(session, knob, pool, value, entry, policy=Policy(mode=mode), now=now)


def version_rows(knob):
    """The knob's table, and the criteria of its rows there (a table may hold several knobs' versions)."""
    rows = knob.versions.row_type
    return rows, [rows.knob == knob.versions.knob] if knob.versions.knob is not None else []


def num_versions(session, knob) -> int:
    rows, mine = version_rows(knob)
    return session.scalar(select(func.count()).select_from(rows).where(*mine))


def made_by(session, knob, version: int) -> int | None:
    """The action the version row names."""
    rows, mine = version_rows(knob)
    return session.scalar(select(rows.action_id).where(*mine, rows.version == version))


@pytest.fixture(params=list(KNOBS))
def knob(request):
    return KNOBS[request.param]


@pytest.mark.parametrize("mode, status", [(Mode.observe, "planned"), (Mode.approve, "awaiting_approval"),
                                          (Mode.auto, "applied")])
def test_the_mode_decides_what_a_proposal_does(sessions, knob, mode, status):
    knob, value, _ = knob
    with sessions() as session, session.begin():
        deployment, pool = make_pool(session, now=NOW)
        action = propose(session, knob, pool, deployment, value, mode)
        assert (action.kind, action.status, action.based_on_version) == (knob.kind, status, 0)
        assert action.trigger == "manual" and action.created_by == "alice"
        if mode == Mode.auto:
            assert action.version == 1 and knob.latest_version(session, pool) == 1
            assert same(knob.get(session, pool, 1), value)
        else:
            assert action.version is None and knob.latest_version(session, pool) == 0
        assert propose(session, knob, pool, deployment, value, Mode.off) is None
        assert session.scalar(select(func.count()).select_from(Action)) == 1


def test_approving_applies_the_proposal_it_kept(sessions, knob):
    knob, value, _ = knob
    with sessions() as session, session.begin():
        deployment, pool = make_pool(session, now=NOW)
        action = propose(session, knob, pool, deployment, value, Mode.approve)
        change.approve(session, knob, pool=pool, action=action, approved_by="bob", now=NOW + 5)
        assert action.status == "applied" and action.version == 1 and action.measured == {"approved_by": "bob"}
        assert same(knob.get(session, pool, 1), value) and action.proposal is None
        assert made_by(session, knob, 1) == action.id


def test_a_proposal_planned_against_an_older_version_is_superseded(sessions, knob):
    knob, first, second = knob
    with sessions() as session, session.begin():
        deployment, pool = make_pool(session, now=NOW)
        waiting = propose(session, knob, pool, deployment, first, Mode.approve)
        propose(session, knob, pool, deployment, second, Mode.auto)  # another change lands first: v1
        change.approve(session, knob, pool=pool, action=waiting, approved_by="bob", now=NOW + 5)
        assert waiting.status == "superseded" and waiting.version is None
        assert waiting.measured["reason"] == f"planned against {knob.kind} v0, v1 is applied"
        assert knob.latest_version(session, pool) == 1 and same(knob.get(session, pool, 1), second)


def test_rejecting_releases_the_proposal(sessions):
    with sessions() as session, session.begin():
        deployment, pool = make_pool(session, now=NOW)
        action = propose(session, PLACEMENT, pool, deployment, table(1), Mode.approve)
        assert action.proposal is not None and action.proposal_share is not None
        change.reject(PLACEMENT, action=action, rejected_by="bob", now=NOW + 5)
        assert action.status == "rejected" and action.measured == {"rejected_by": "bob"}
        assert action.proposal is None and action.proposal_share is None
        assert PLACEMENT.latest_version(session, pool) == 0


def test_a_change_measured_worse_is_rolled_back_as_a_new_version_it_made(sessions, knob):
    knob, first, second = knob
    with sessions() as session, session.begin():
        deployment, pool = make_pool(session, now=NOW)
        propose(session, knob, pool, deployment, first, Mode.auto)  # v1
        worse = propose(session, knob, pool, deployment, second, Mode.auto)  # v2
        change.settle(session, knob, pool=pool, action=worse, outcome=VerifyOutcome.rolled_back,
                      measured={"imbalance_after": 2.0}, now=NOW + 20)
        assert worse.status == "rolled_back" and worse.version == 2
        assert worse.measured == {"imbalance_after": 2.0, "restored_version": 3}
        assert same(knob.get(session, pool, 3), first) and made_by(session, knob, 3) == worse.id


def test_a_change_measured_worse_after_a_later_one_replaced_it_failed(sessions, knob):
    knob, first, second = knob
    with sessions() as session, session.begin():
        deployment, pool = make_pool(session, now=NOW)
        earlier = propose(session, knob, pool, deployment, first, Mode.auto)  # v1
        propose(session, knob, pool, deployment, second, Mode.auto)  # v2 replaced it
        change.settle(session, knob, pool=pool, action=earlier, outcome=VerifyOutcome.rolled_back, measured={},
                      now=NOW + 20)
        assert earlier.status == "failed" and num_versions(session, knob) == 3  # v0..v2: nothing restored
        assert same(knob.get(session, pool, 2), second)


def test_a_verified_change_stays(sessions):
    with sessions() as session, session.begin():
        deployment, pool = make_pool(session, now=NOW)
        action = propose(session, ROUTING, pool, deployment, 3, Mode.auto)
        change.settle(session, ROUTING, pool=pool, action=action, outcome=VerifyOutcome.verified,
                      measured={"all2all_share_after": 0.2}, now=NOW + 20)
        assert action.status == "verified" and ROUTING.get(session, pool, ROUTING.latest_version(session, pool)) == 3
