"""The wire contract: what an agent sends is what the controller reads, in a pinned, compact format."""

from __future__ import annotations

import base64
import json
import zlib

import numpy as np
import pytest
from pydantic import ValidationError

from agents.protocol import (
    PLACEMENT_UNKNOWN,
    PROTOCOL_VERSION,
    Array,
    DesiredState,
    Identity,
    ModelShape,
    RoutingLimits,
    RunningPlacement,
    Snapshot,
    default_slot_to_expert,
    error_code,
)

MODEL = ModelShape(name="dsv3", num_layers=58, num_experts=256, num_groups=8, top_k=8)


def snapshot(**overrides) -> Snapshot:
    rng = np.random.default_rng(0)
    fields = dict(
        identity=Identity(deployment="dsv3", instance="decode-0", role="decode", rank=3, ep_size=32,
                          slots_per_rank=9),
        model=MODEL, window_start=1_800_000_000.0, window_seconds=10.0, placement_version=4, num_steps=200,
        expert_tokens=Array.from_numpy(rng.poisson(50, (58, 256))),
        slot_tokens=Array.from_numpy(rng.poisson(400, (58, 9))),
        forward_seconds=9.1, dispatch_seconds=1.2, combine_seconds=1.1, prefix_query_tokens=1000,
        prefix_hit_tokens=600, spec_drafts=100, spec_draft_tokens=100, spec_accepted_tokens=81)
    return Snapshot(**(fields | overrides))


def test_snapshot_round_trips_through_json():
    sent = snapshot()
    received = Snapshot.model_validate_json(sent.model_dump_json())
    assert received == sent
    np.testing.assert_array_equal(received.expert_tokens.to_numpy(), sent.expert_tokens.to_numpy())
    assert received.expert_tokens.to_numpy().dtype == np.int64


def test_array_format_is_pinned():
    """base64(zlib(little-endian C-order bytes)) with dtype and shape beside: other implementations
    (a Go or Rust agent) decode it from this description alone."""
    expected = np.array([[1, 2, 3], [4, 5, 6]], dtype=np.int64)
    data = base64.b64encode(zlib.compress(expected.astype("<i8").tobytes())).decode()
    wire = json.loads(json.dumps({"dtype": "int64", "shape": [2, 3], "data": data}))
    np.testing.assert_array_equal(Array.model_validate(wire).to_numpy(), expected)
    floats = np.array([0.5, -1.25], dtype=np.float32)
    wire = {"dtype": "float32", "shape": [2], "data": base64.b64encode(zlib.compress(floats.astype("<f4").tobytes()))}
    np.testing.assert_array_equal(Array.model_validate(wire).to_numpy(), floats)


def test_a_full_size_snapshot_is_compact():
    as_lists = len(json.dumps(snapshot().expert_tokens.to_numpy().tolist()))
    assert len(snapshot().model_dump_json()) < as_lists / 2


@pytest.mark.parametrize("array, message", [
    (Array(dtype="int64", shape=(2, 2), data=base64.b64encode(zlib.compress(b"\0" * 8)).decode()), "needs 32"),
    (Array(dtype="int64", shape=(1,), data="not base64!"), "base64"),
])
def test_corrupt_arrays_are_named(array, message):
    with pytest.raises(ValueError, match=message):
        array.to_numpy()


def test_an_inflating_body_stops_at_the_promised_size():
    bomb = base64.b64encode(zlib.compress(b"\0" * 50_000_000)).decode()
    with pytest.raises(ValueError, match="needs 8"):
        Array(dtype="int64", shape=(1,), data=bomb).to_numpy()


def test_unknown_protocol_version_is_refused():
    body = json.loads(snapshot().model_dump_json()) | {"protocol": "moectl.v0"}
    with pytest.raises(ValidationError, match="moectl.v1"):
        Snapshot.model_validate(body)


def test_desired_state_round_trips_and_omits_unchanged_tables():
    table = np.arange(58 * 288).reshape(58, 288) % 256
    sent = DesiredState(placement_version=5, slot_to_expert=Array.from_numpy(table),
                        routing=RoutingLimits(topk_group=4))
    received = DesiredState.model_validate_json(sent.model_dump_json())
    np.testing.assert_array_equal(received.slot_to_expert.to_numpy(), table)
    assert received.routing.topk_group == 4 and received.protocol == PROTOCOL_VERSION
    small = DesiredState(placement_version=5)
    assert "slot_to_expert" not in small.model_dump_json(exclude_none=True)


def test_a_snapshot_without_a_running_table_reads_as_before():
    """Older controllers forbid unknown fields: the optional table is left out of the JSON unless sent."""
    assert "running_placement" not in json.loads(snapshot().model_dump_json())


def test_the_running_table_round_trips_and_must_be_one_the_pool_can_run():
    table = default_slot_to_expert(58, 256, 32 * 9)
    share = np.random.default_rng(0).random(table.shape)
    sent = snapshot(running_placement=RunningPlacement(slot_to_expert=Array.from_numpy(table),
                                                       slot_share=Array.from_numpy(share)))
    received = Snapshot.model_validate_json(sent.model_dump_json())
    np.testing.assert_array_equal(received.running_placement.slot_to_expert.to_numpy(), table)
    np.testing.assert_array_equal(received.running_placement.slot_share.to_numpy(), share)
    missing = table.copy()
    missing[3] = 0
    for bad, message in ((table[:, :-9], r"needs int64 \[58, 288\]"), (missing, "layer 3 gives no slot"),
                         (table + 256, "outside 0..255")):
        with pytest.raises(ValidationError, match=message):
            snapshot(running_placement=RunningPlacement(slot_to_expert=Array.from_numpy(bad)))


def test_error_codes_are_read_from_error_bodies():
    assert error_code(json.dumps({"detail": "x", "code": PLACEMENT_UNKNOWN}).encode()) == PLACEMENT_UNKNOWN
    assert error_code(b'{"detail": "x"}') is None and error_code(b"<html>") is None and error_code(b"[1]") is None

def test_groups_and_nodes_per_token_are_optional():
    old = json.loads(snapshot().model_dump_json())
    for field in ("routing_groups_per_token", "routing_nodes_per_token"):
        del old[field]
    assert Snapshot.model_validate(old).routing_groups_per_token == []  # an agent from before them still speaks v1
    sent = snapshot(routing_groups_per_token=[0, 10, 30, 60, 0, 0, 0, 0, 0],
                    routing_nodes_per_token=[0, 40, 60, 0, 0, 0, 0, 0, 0])
    assert Snapshot.model_validate_json(sent.model_dump_json()) == sent


@pytest.mark.parametrize("fields, message", [
    (dict(routing_groups_per_token=[0] * 10), "at most 9 bins"),  # top_k 8: a token reaches 0..8 groups
    (dict(routing_nodes_per_token=[0] * 100), "at most 65 items"),
    (dict(routing_nodes_per_token=[0, -1]), "greater than or equal to 0"),
    (dict(routing_groups_per_token=[0, 2**40 + 1]), "less than or equal to 1099511627776"),
    (dict(routing_groups_per_token=[0, 5], routing_nodes_per_token=[0, 4]), "both count every token"),
])
def test_groups_and_nodes_per_token_are_bounded(fields, message):
    with pytest.raises(ValidationError, match=message):
        snapshot(**fields)
