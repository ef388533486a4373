"""A well-formed snapshot checked against what the controller knows: each misfit names itself."""

from __future__ import annotations

import pytest
from support.store import MODEL, snapshot

from controlplane.collect.validate import PoolShape, SnapshotRejected, check_snapshot

NOW = 1_800_000_000.0
POOL = PoolShape(ep_size=2, slots_per_rank=5)


def check(s, *, model=MODEL, pool=POOL, latest_version: int = 0) -> None:
    check_snapshot(s, model, pool, latest_version, NOW, max_age_seconds=300.0)


def test_a_fitting_snapshot_passes():
    check(snapshot(window_start=NOW - 10))
    check(snapshot(window_start=NOW - 10), pool=None)  # the pool's first rank
    check(snapshot(window_start=NOW + 25))  # a little clock skew
    check(snapshot(window_start=NOW - 10, placement_version=3), latest_version=3)


@pytest.mark.parametrize("kwargs, status, words", [
    ({"model": MODEL.model_copy(update={"num_groups": 4})}, 409, "num_groups=2 (registered 4)"),
    ({"pool": PoolShape(ep_size=4, slots_per_rank=5)}, 409, "runs ep_size=4, slots_per_rank=5"),
    ({"latest_version": 2, "placement_version": 3}, 409, "placement_version 3 was never issued"),
    ({"window_start": NOW - 400}, 422, "ended 390s ago"),
    ({"window_start": NOW + 60}, 422, "60s in the future"),
])
def test_a_misfit_is_refused_with_its_status_and_name(kwargs, status, words):
    snapshot_fields = {k: kwargs.pop(k) for k in ("placement_version", "window_start") if k in kwargs}
    with pytest.raises(SnapshotRejected) as refused:
        check(snapshot(**{"window_start": NOW - 10} | snapshot_fields), **kwargs)
    assert refused.value.status == status and words in str(refused.value)
