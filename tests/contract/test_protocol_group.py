"""moectl.v2, the group snapshot: its wire format is pinned, it carries every rank's part of a v1 snapshot,
and each protocol's body is refused where the other is expected with a message naming the right endpoint."""

from __future__ import annotations

import json

import numpy as np
import pytest
from pydantic import ValidationError

from agents.protocol import (
    GROUP_PROTOCOL_VERSION,
    Array,
    GroupSnapshot,
    Identity,
    ModelShape,
    RankRow,
    RunningPlacement,
    Snapshot,
    default_slot_to_expert,
)
from agents.protocol.group import GROUP_FIELDS

MODEL = ModelShape(name="dsv3", num_layers=58, num_experts=256, num_groups=8, top_k=8)
EP_SIZE, SLOTS = 32, 9


def rank_snapshot(rank: int, rng: np.random.Generator) -> Snapshot:
    return Snapshot(identity=Identity(deployment="dsv3", instance="prefill-0", role="prefill", rank=rank,
                                      ep_size=EP_SIZE, slots_per_rank=SLOTS, node=f"n{rank // 8}",
                                      gpu_uuid=f"GPU-{rank}"),
                    model=MODEL, window_start=1_800_000_000.0, window_seconds=5.0, placement_version=3,
                    num_steps=100, expert_tokens=Array.from_numpy(rng.poisson(50, (58, 256))),
                    slot_tokens=Array.from_numpy(rng.poisson(400, (58, SLOTS))), forward_seconds=4.5,
                    prefix_query_tokens=100, prefix_hit_tokens=40 + rank, spec_drafts=10, spec_draft_tokens=20,
                    spec_accepted_tokens=15, spec_accepted_by_position=[9, 6], routing_recall=0.9,
                    routing_groups_per_token=[0, 0, 5, 20 + rank, 7], routing_nodes_per_token=[0, 10, 22 + rank])


@pytest.fixture(scope="module")
def ranks() -> list[Snapshot]:
    rng = np.random.default_rng(0)
    return [rank_snapshot(r, rng) for r in range(EP_SIZE)]


def test_a_group_snapshot_sums_the_load_and_keeps_each_rank(ranks):
    group = GroupSnapshot.gather(list(reversed(ranks)))  # any order in, rank order out
    received = GroupSnapshot.model_validate_json(group.model_dump_json())
    assert received == group and received.protocol == GROUP_PROTOCOL_VERSION == "moectl.v2"
    np.testing.assert_array_equal(received.expert_tokens.to_numpy(), sum(s.expert_tokens.to_numpy() for s in ranks))
    np.testing.assert_array_equal(received.slot_tokens.to_numpy(),
                                  np.concatenate([s.slot_tokens.to_numpy() for s in ranks], axis=1))
    assert [r.rank for r in received.ranks] == list(range(EP_SIZE))
    assert received.ranks[5] == RankRow.of(ranks[5]) and received.ranks[5].gpu_uuid == "GPU-5"
    # one body instead of 32: a fraction of what the ranks' own snapshots weigh together
    assert len(group.model_dump_json()) < sum(len(s.model_dump_json()) for s in ranks) / 8


def test_the_wire_format_is_pinned(ranks):
    body = json.loads(GroupSnapshot.gather(ranks).model_dump_json())
    assert set(body) == {"protocol", "deployment", "instance", "role", "ep_size", "slots_per_rank", "gpus_per_node",
                         "model", "window_start", "window_seconds", "expert_tokens", "slot_tokens", "ranks"}
    assert body["expert_tokens"]["shape"] == [58, 256] and body["slot_tokens"]["shape"] == [58, EP_SIZE * SLOTS]
    assert set(body["ranks"][0]) >= {"rank", "node", "gpu_uuid", "placement_version", "num_steps", "forward_seconds",
                                     "ttft", "itl", "routing_recall", "spec_accepted_by_position",
                                     "routing_groups_per_token", "routing_nodes_per_token"}


def test_the_running_table_is_the_newest_versions_and_one_the_group_can_run(ranks):
    """The table is sent only after a PLACEMENT_UNKNOWN refusal (the body above has none) and names the newest
    version any rank ran."""
    behind = [r.model_copy(update={"placement_version": 5 if r.identity.rank == 7 else 3}) for r in ranks]
    group = GroupSnapshot.gather(behind)
    assert group.placement_version == 5
    table = default_slot_to_expert(58, 256, EP_SIZE * SLOTS)
    sent = group.model_copy(update={"running_placement": RunningPlacement(slot_to_expert=Array.from_numpy(table))})
    received = GroupSnapshot.model_validate_json(sent.model_dump_json())
    np.testing.assert_array_equal(received.running_placement.slot_to_expert.to_numpy(), table)
    body = json.loads(sent.model_dump_json()) | {"running_placement": {"slot_to_expert": json.loads(
        Array.from_numpy(table[:, :-SLOTS]).model_dump_json())}}
    with pytest.raises(ValidationError, match=r"needs int64 \[58, 288\]"):
        GroupSnapshot.model_validate(body)


def test_a_rank_row_carries_every_per_rank_field_of_a_v1_snapshot():
    """A field added to Snapshot must reach the controller from group snapshots too: here, or in GROUP_FIELDS."""
    missing = set(Snapshot.model_fields) - GROUP_FIELDS - set(RankRow.model_fields)
    assert not missing, f"add {sorted(missing)} to RankRow (agents/protocol/group.py)"


@pytest.mark.parametrize("change, message", [
    (lambda b: b | {"ranks": b["ranks"][:-1]}, "each rank 0..31 of the group once"),
    (lambda b: b | {"ranks": [b["ranks"][0]] + b["ranks"][:-1]}, "each rank 0..31 of the group once"),
    (lambda b: b | {"slot_tokens": Array.from_numpy(np.zeros((58, 9), np.int64)).model_dump()},
     "slot_tokens has shape"),
    (lambda b: b | {"ranks": [b["ranks"][0] | {"prefix_hit_tokens": 10**6}] + b["ranks"][1:]},
     "rank 0: prefix_hit_tokens exceeds"),
    (lambda b: b | {"ranks": b["ranks"][:3] + [b["ranks"][3] | {"routing_groups_per_token": [1] * 10}]
                    + b["ranks"][4:]}, "rank 3: routing_groups_per_token has 10 bins"),
    (lambda b: b | {"ranks": b["ranks"][:3] + [b["ranks"][3] | {"routing_nodes_per_token": [0, 1]}]
                    + b["ranks"][4:]}, "rank 3: routing_groups_per_token counts 35 tokens"),
])
def test_a_malformed_group_is_refused_naming_the_problem(ranks, change, message):
    body = json.loads(GroupSnapshot.gather(ranks).model_dump_json())
    with pytest.raises(ValidationError, match=message):
        GroupSnapshot.model_validate(change(body))


def test_each_protocol_refuses_the_others_body_naming_its_endpoint(ranks):
    with pytest.raises(ValidationError, match="'moectl.v2' is a group snapshot: post it to /v2/agents/snapshot"):
        Snapshot.model_validate(json.loads(ranks[0].model_dump_json()) | {"protocol": "moectl.v2"})
    with pytest.raises(ValidationError, match="'moectl.v1' rank snapshots to /v1/agents/snapshot"):
        GroupSnapshot.model_validate(json.loads(GroupSnapshot.gather(ranks).model_dump_json()) |
                                     {"protocol": "moectl.v1"})
