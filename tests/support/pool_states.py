"""Builders of the loop's observed pool (`controlplane/observed/pool.py` `PoolState`) for the planner's tests."""

from __future__ import annotations

import numpy as np

from agents.protocol import PlacementTable, default_slot_to_expert
from controlplane.desired import KnobKind
from controlplane.observed.knob_in_force import KnobInForce
from controlplane.observed.pool import PoolState
from controlplane.observed.window import RANK_REPORTS, Window
from controlplane.plan.capacity_factor import capped_load

# the planner's tests' pool: 2 MoE layers of 16 experts on 4 GPUs of 5 slots
NUM_LAYERS, NUM_EXPERTS, EP, SLOTS_PER_RANK = 2, 16, 4, 5


def skewed_window(index: int, table: np.ndarray, version: int = 0, hot: float = 20.0, ep: int = EP, *,
                  factor: float | None = None, dropped_share: float = 0.0) -> Window:
    """10 s of even load but expert 0 of every layer `hot` times the others, every rank's slot load in, processed by
    `table` as capped at `factor` (None: no cap) with `dropped_share` of the assignments counted dropped."""
    load = np.full((NUM_LAYERS, NUM_EXPERTS), 100.0)
    load[:, 0] *= hot
    counters = {f"{RANK_REPORTS}{rank}": 1 for rank in range(ep)}
    if dropped_share:
        counters["dropped_tokens"] = dropped_share * load.sum()
    return Window(index=index, start=index * 10.0, seconds=10.0, placement_version=version, num_reports=ep,
                  num_slot_reports=ep, expert_tokens=load,
                  slot_tokens=PlacementTable(table).slot_load(capped_load(load, factor)), counters=counters)


def skewed_pool(num_windows: int = 3, *, ep: int = EP, slots_per_rank: int = SLOTS_PER_RANK, fresh: int | None = None,
                hot: float = 20.0, factor: float | None = None, dropped_share: float = 0.0, **fields) -> PoolState:
    """A pool at placement version 0 (the default table) with `num_windows` `skewed_window`s; `fresh` of its `ep`
    agents fresh (all by default), the capacity factor `factor` in force since 0 s, other `PoolState` fields."""
    table = default_slot_to_expert(NUM_LAYERS, NUM_EXPERTS, ep * slots_per_rank)
    in_force = {} if factor is None else {KnobKind.expert_capacity: KnobInForce(1, factor, 0.0)}
    return PoolState(deployment="d", role="decode", num_layers=NUM_LAYERS, num_experts=NUM_EXPERTS, num_groups=4,
                     ep_size=ep, slots_per_rank=slots_per_rank, gpus_per_node=8, num_agents=ep,
                     num_fresh_agents=ep if fresh is None else fresh, placement_version=0, slot_to_expert=table,
                     windows=tuple(skewed_window(i, table, hot=hot, ep=ep, factor=factor, dropped_share=dropped_share)
                                   for i in range(num_windows)), in_force=in_force, **fields)


def routing_in_force(topk_group: int | None, changed_at: float | None) -> dict[str, KnobInForce]:
    """`PoolState.in_force` with the routing limit `topk_group` issued at `changed_at` (None: never changed,
    version 0)."""
    return {KnobKind.routing: KnobInForce(0 if changed_at is None else 1, topk_group, changed_at)}
