"""The snapshot response: the table travels only to a rank that runs another version."""

from __future__ import annotations

import numpy as np

from agents.protocol import RoutingLimits
from controlplane.api.desired_state import desired_state


def test_the_table_travels_only_when_the_rank_runs_another_version():
    table, share = np.arange(12).reshape(2, 6), np.full((2, 6), 0.5)
    kwargs = dict(placement_version=3, slot_to_expert=table, slot_share=share, routing=RoutingLimits(topk_group=2),
                  window_seconds=5.0)
    current = desired_state(reported_version=3, **kwargs)
    assert current.slot_to_expert is None and current.slot_share is None and current.routing.topk_group == 2
    behind = desired_state(reported_version=2, **kwargs)
    np.testing.assert_array_equal(behind.slot_to_expert.to_numpy(), table)
    np.testing.assert_array_equal(behind.slot_share.to_numpy(), share)
    assert desired_state(reported_version=2, **kwargs | {"slot_share": None}).slot_share is None
