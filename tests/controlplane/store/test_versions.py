"""Versioned knobs in the store: a new pool holds version 0 of its placement and routing limit, and a
version number is taken once per pool (a second writer of the same version fails)."""

from __future__ import annotations

import numpy as np
import pytest
from sqlalchemy.exc import IntegrityError
from support.store import EP_SIZE, MODEL, SLOTS_PER_RANK, make_pool

from agents.protocol import default_slot_to_expert
from agents.protocol.placement import PlacementTable
from controlplane.store.knobs import PLACEMENT, POOL_SIZE, PREFILL_THRESHOLD, ROUTING

NOW = 1_800_000_000.0


def test_a_new_pool_holds_version_0_of_each_knob(sessions):
    with sessions() as session, session.begin():
        _, pool = make_pool(session, now=NOW)
        placement, routing = PLACEMENT.versions.latest(session, pool), ROUTING.versions.latest(session, pool)
    assert placement.version == 0 and placement.value.slot_share is None and placement.action_id is None
    np.testing.assert_array_equal(placement.value.slot_to_expert,
                                  default_slot_to_expert(MODEL.num_layers, MODEL.num_experts, EP_SIZE * SLOTS_PER_RANK))
    assert (routing.version, routing.value, routing.action_id, routing.created_at) == (0, None, None, NOW)


def test_routing_limits_keep_every_version(sessions):
    with sessions() as session, session.begin():
        _, pool = make_pool(session, now=NOW)
        ROUTING.versions.add(session, pool=pool, version=1, value=3, action_id=11, now=NOW + 10)
        ROUTING.versions.add(session, pool=pool, version=2, value=None, action_id=12, now=NOW + 20)
        latest = ROUTING.versions.latest(session, pool)
        assert (latest.version, latest.value, latest.action_id, latest.created_at) == (2, None, 12, NOW + 20)
        assert ROUTING.versions.get(session, pool, 1).value == 3 and ROUTING.versions.get(session, pool, 5) is None


def test_knobs_sharing_a_table_keep_their_versions_apart(sessions):
    """The routing limit, pool size and threshold share one table: each numbers its own versions and reads only
    its own; pruning one leaves the others."""
    with sessions() as session, session.begin():
        _, pool = make_pool(session, now=NOW)
        ROUTING.versions.add(session, pool=pool, version=1, value=3, action_id=11, now=NOW + 10)
        POOL_SIZE.versions.add(session, pool=pool, version=1, value=4, action_id=12, now=NOW + 20)
        ROUTING.versions.add(session, pool=pool, version=2, value=2, action_id=13, now=NOW + 30)
        latest = {knob: versions.latest(session, pool)
                  for knob, versions in [("routing", ROUTING.versions), ("size", POOL_SIZE.versions), ("threshold",
                                                                                             PREFILL_THRESHOLD.versions)]}
        assert {k: (v.version, v.value) for k, v in latest.items()} == {"routing": (2, 2), "size": (1, 4),
                                                                         "threshold": (0, None)}
        assert [v.version for v in POOL_SIZE.versions.recent(session, pool, since=NOW)] == [0, 1]
        assert ROUTING.versions.prune(session, pool, before=NOW + 40, keep=set(), limit=10) == 2  # v0 and v1
        assert [v.version for v in POOL_SIZE.versions.recent(session, pool, since=NOW)] == [0, 1]
        assert PREFILL_THRESHOLD.versions.get(session, pool, 0).value is None


@pytest.mark.parametrize("add", [
    lambda session, pool: ROUTING.versions.add(session, pool=pool, version=1, value=2, action_id=None, now=NOW),
    lambda session, pool: PLACEMENT.versions.add(session, pool=pool, version=1, value=PlacementTable(np.zeros((2, 10))),
                                         action_id=None, now=NOW),
], ids=["routing", "placement"])
def test_a_version_is_written_once(sessions, add):
    with sessions() as session, session.begin():
        _, pool = make_pool(session, now=NOW)
        add(session, pool)
        with pytest.raises(IntegrityError), session.begin_nested():
            add(session, pool)
