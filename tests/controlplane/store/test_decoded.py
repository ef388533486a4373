"""Decoded blobs kept by content: a window read again is not decoded again, a window that got another report
reads its new sums, and the cache stays under its bound."""

from __future__ import annotations

import numpy as np
import pytest
from support.store import make_pool, snapshot

from controlplane.collect.aggregate import to_report
from controlplane.store import arrays, deployments, windows
from controlplane.store.decoded import DecodedArrays, WrittenArrays

NOW = 1_800_000_000.0


def test_a_window_read_twice_is_decoded_once_and_a_new_report_is_read(sessions, monkeypatch):
    decoded = []
    real = arrays.unpack
    monkeypatch.setattr("controlplane.store.decoded.unpack", lambda blob: decoded.append(blob) or real(blob))

    def add(rank: int) -> None:
        with sessions() as session, session.begin():
            deployment, pool = deployments.get(session, "tiny"), deployments.pools_of(session,
                                                                                   deployments.get(session, "tiny"))[0]
            windows.add_report(session, pool=pool, report=to_report(snapshot(window_start=NOW, rank=rank), 10.0),
                               current_version=0, grid_seconds=10.0, empty=deployments.zeros_for(deployment, pool))

    def read():
        with sessions() as session:
            pool = deployments.pools_of(session, deployments.get(session, "tiny"))[0]
            return windows.recent(session, pool, before_index=10**9, limit=5)

    with sessions() as session, session.begin():
        make_pool(session, now=NOW)
    add(0)
    [first] = read()
    [again] = read()
    assert len(decoded) == 2 and again.expert_tokens is first.expert_tokens  # two blobs, decoded once
    with pytest.raises(ValueError):
        first.slot_tokens[0, 0] = 1  # shared by every reader: read-only
    add(1)
    [later] = read()
    assert len(decoded) == 4 and later.num_reports == 2
    np.testing.assert_array_equal(later.expert_tokens, 2 * first.expert_tokens)  # rank 1 drew the same load


def test_least_recently_used_arrays_go_past_the_bound():
    blobs = [arrays.pack(np.full((4, 4), i, np.int64)) for i in range(4)]
    decoded = DecodedArrays(max_bytes=2 * (128 + max(len(b) for b in blobs)) + 10)  # room for two
    for blob in blobs[:2]:
        decoded.unpack(blob)
    decoded.unpack(blobs[0])  # used again: blobs[1] is now the least recent
    decoded.unpack(blobs[2])
    assert decoded.num_bytes <= decoded.max_bytes
    assert list(decoded._arrays) == [blobs[0], blobs[2]]
    assert int(decoded.unpack(blobs[3])[0, 0]) == 3


def test_written_arrays_hand_out_a_copy_only_for_the_bytes_kept_for_that_window():
    kept = np.arange(12, dtype=np.int64).reshape(3, 4)
    blob = arrays.pack(kept)
    written = WrittenArrays(max_windows=1)
    written.keep((1, 7), {blob: kept})
    kept[0, 0] = 99  # the caller's array may change after: what was kept does not
    first = written.unpack((1, 7), blob)
    first[0, 1] = -1  # nor does what was handed out
    np.testing.assert_array_equal(written.unpack((1, 7), blob), np.arange(12).reshape(3, 4))
    other = arrays.pack(np.ones((3, 4), np.int64))  # bytes another process wrote: decoded
    np.testing.assert_array_equal(written.unpack((1, 7), other), np.ones((3, 4)))
    written.keep((1, 8), {other: np.ones((3, 4), np.int64)})  # past max_windows: window 7's went, and decodes
    np.testing.assert_array_equal(written.unpack((1, 7), blob), np.arange(12).reshape(3, 4))
