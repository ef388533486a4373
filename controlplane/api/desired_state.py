"""The desired state a rank gets back in its snapshot response."""

from __future__ import annotations

import numpy as np

from agents.protocol import Array, DesiredState, RoutingLimits


def desired_state(*, placement_version: int, slot_to_expert: np.ndarray, slot_share: np.ndarray | None,
                  reported_version: int, routing: RoutingLimits, window_seconds: float,
                  local_prefill_threshold: int | None = None) -> DesiredState:
    """The table travels only when the rank runs another version: most responses stay tiny."""
    is_changed = reported_version != placement_version
    return DesiredState(
        placement_version=placement_version,
        slot_to_expert=Array.from_numpy(slot_to_expert) if is_changed else None,
        slot_share=Array.from_numpy(slot_share) if is_changed and slot_share is not None else None,
        routing=routing, local_prefill_threshold=local_prefill_threshold, window_seconds=window_seconds)
