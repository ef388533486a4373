"""What the controller answers a snapshot: the state it wants the rank to run."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from agents.protocol.array import Array
from agents.protocol.wire import MAX_COUNT, MAX_VERSION, PROTOCOL_VERSION, _Frozen


class RoutingLimits(_Frozen):
    topk_group: int | None = Field(default=None, ge=1, le=4096, description="max expert groups per token")
    expert_capacity_factor: float | None = Field(default=None, gt=0, le=1000, allow_inf_nan=False)


class DesiredState(_Frozen):
    """What the controller wants a rank to run; rides the snapshot response.

    `slot_to_expert`: [num_layers, ep_size * slots_per_rank] int64, the whole EP group's table; sent
    only when the rank reported another placement_version. `slot_share`: same shape, the fraction of
    its expert's tokens each slot takes (absent: even split across the expert's replicas).
    """

    protocol: Literal["moectl.v1"] = PROTOCOL_VERSION
    placement_version: int = Field(ge=0, le=MAX_VERSION)
    slot_to_expert: Array | None = None
    slot_share: Array | None = None
    routing: RoutingLimits = RoutingLimits()
    local_prefill_threshold: int | None = Field(default=None, ge=0, le=MAX_COUNT,
                                                description="PD-aware threshold, tokens")
    window_seconds: float | None = Field(default=None, gt=0, le=3600, allow_inf_nan=False,
                                         description="the window length the controller wants")
