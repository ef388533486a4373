"""What a post is checked against and answered with, in one query: each part the newest of its own kind (the
pool's placement, routing limit and capacity factor, the decode pool's threshold, the deployment's policy), never
another pool's or an older version."""

from __future__ import annotations

import numpy as np
from support.store import EP_SIZE, MODEL, SLOTS_PER_RANK, make_pool

from agents.protocol.placement import PlacementTable
from controlplane.desired import Policy
from controlplane.store import in_force, policies
from controlplane.store.knobs import CAPACITY_FACTOR, PLACEMENT, PREFILL_THRESHOLD, ROUTING

NOW = 1_800_000_000.0


def test_a_post_reads_the_newest_of_each_knob_of_its_own_pool(sessions):
    table = np.arange(MODEL.num_layers * EP_SIZE * SLOTS_PER_RANK).reshape(MODEL.num_layers, -1) % MODEL.num_experts
    with sessions() as session, session.begin():
        deployment, decode = make_pool(session, now=NOW, policy=Policy(local_prefill_threshold=100))
        _, prefill = make_pool(session, now=NOW, role="prefill")
        for version in (1, 2):  # the prefill pool's newest is 2; the decode pool stays at 0
            PLACEMENT.versions.add(session, pool=prefill, version=version, value=PlacementTable(table + version - 1),
                           action_id=None, now=NOW + version)
        ROUTING.versions.add(session, pool=prefill, version=1, value=3, action_id=None, now=NOW)
        ROUTING.versions.add(session, pool=decode, version=1, value=2, action_id=None, now=NOW)
        for version, factor in ((1, 2.5), (2, 1.25)):  # kept in hundredths, read back as the factor
            CAPACITY_FACTOR.versions.add(session, pool=prefill, version=version, value=factor, action_id=None, now=NOW)
        PREFILL_THRESHOLD.versions.add(session, pool=decode, version=1, value=512, action_id=None, now=NOW)
        PREFILL_THRESHOLD.versions.add(session, pool=prefill, version=1, value=7, action_id=None, now=NOW)  # not read
        policies.put(session, deployment=deployment, policy=Policy(local_prefill_threshold=200), created_by="t",
                     now=NOW)

    with sessions() as session:
        state = in_force.read(session, "tiny", "prefill")
        assert (state.pool.id, state.decode.id) == (prefill.id, decode.id)
        assert state.placement.version == 2
        np.testing.assert_array_equal(state.placement.value.slot_to_expert, table + 1)
        assert state.topk_group == 3 and state.local_prefill_threshold == 512
        assert (state.policy_version, state.policy.local_prefill_threshold) == (2, 200)
        on_decode = in_force.read(session, "tiny", "decode")
        assert on_decode.pool.id == on_decode.decode.id == decode.id
        assert (on_decode.placement.version, on_decode.topk_group) == (0, 2)
        assert state.knobs[CAPACITY_FACTOR.kind] == 1.25 and on_decode.knobs[CAPACITY_FACTOR.kind] is None


def test_without_a_pool_of_the_role_or_a_threshold_the_policy_answers(sessions):
    with sessions() as session, session.begin():
        make_pool(session, now=NOW, role="prefill", policy=Policy(local_prefill_threshold=300))
    with sessions() as session:
        state = in_force.read(session, "tiny", "decode")  # no decode pool yet: nor a threshold of moectl's
        assert state.pool is None and state.decode is None and state.placement is None
        assert state.local_prefill_threshold == 300
        assert in_force.read(session, "other", "decode") is None
