"""The one builder of the loop's observed pool (`controlplane/observed/pool.py` `PoolState`) and its windows
(`controlplane/observed/window.py` `Window`) for tests: `pool_state` and `loop_window`; the skewed ones are the
planner's tests' usual pool."""

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


def every_rank_reported(num_ranks: int) -> dict[str, float]:
    """A window's counters saying each of `num_ranks` ranks reported once (the completeness the planner checks)."""
    return {f"{RANK_REPORTS}{rank}": 1 for rank in range(num_ranks)}


def loop_window(index: int, expert_tokens: np.ndarray, slot_tokens: np.ndarray, *, version: int = 0,
                num_reports: int = 1, num_slot_reports: int | None = None, seconds: float = 10.0,
                start: float | None = None, counters: dict[str, float] | None = None) -> Window:
    """The loop's window `index`, `seconds` long from `start` (default: index * seconds) under placement `version`.
    expert_tokens: [num_layers, num_experts] tokens routed; slot_tokens: [num_layers, num_slots] tokens processed;
    `num_slot_reports` defaults to `num_reports`."""
    return Window(index=index, start=index * seconds if start is None else start, seconds=seconds,
                  placement_version=version, num_reports=num_reports,
                  num_slot_reports=num_reports if num_slot_reports is None else num_slot_reports,
                  expert_tokens=expert_tokens, slot_tokens=slot_tokens, counters=dict(counters or {}))


def pool_state(table: np.ndarray, num_experts: int, windows=(), *, ep: int = EP, num_groups: int = 4,
               gpus_per_node: int = 8, deployment: str = "d", role: str = "decode", **fields) -> PoolState:
    """A pool serving `table` ([num_layers, num_slots] expert per slot, `ep` GPUs of num_slots / ep slots) at
    placement version 0 with `windows`, all `ep` agents fresh unless `fields` say otherwise (any `PoolState` field)."""
    defaults = {"num_agents": ep, "num_fresh_agents": ep, "placement_version": 0}
    return PoolState(deployment=deployment, role=role, num_layers=table.shape[0], num_experts=num_experts,
                     num_groups=num_groups, ep_size=ep, slots_per_rank=table.shape[1] // ep,
                     gpus_per_node=gpus_per_node, slot_to_expert=table, windows=tuple(windows),
                     **(defaults | fields))


def skewed_window(index: int, table: np.ndarray, version: int = 0, hot: float = 20.0, ep: int = EP, *,
                  factor: float | None = None, dropped_share: float = 0.0) -> Window:
    """10 s of even load but expert 0 of every layer `hot` times the others, every rank's slot load in, processed by
    `table` as capped at `factor` (None: no cap) with `dropped_share` of the assignments counted dropped."""
    load = np.full((NUM_LAYERS, NUM_EXPERTS), 100.0)
    load[:, 0] *= hot
    counters = every_rank_reported(ep)
    if dropped_share:
        counters["dropped_tokens"] = dropped_share * load.sum()
    return loop_window(index, load, PlacementTable(table).slot_load(capped_load(load, factor)), version=version,
                       num_reports=ep, counters=counters)


def skewed_pool(num_windows: int = 3, *, ep: int = EP, slots_per_rank: int = SLOTS_PER_RANK, fresh: int | None = None,
                hot: float = 20.0, factor: float | None = None, dropped_share: float = 0.0, **fields) -> PoolState:
    """A pool at placement version 0 (the default table) with `num_windows` `skewed_window`s; `fresh` of its `ep`
    agents fresh (all by default), the capacity factor `factor` in force since 0 s, other `PoolState` fields."""
    table = default_slot_to_expert(NUM_LAYERS, NUM_EXPERTS, ep * slots_per_rank)
    in_force = {} if factor is None else {KnobKind.expert_capacity: KnobInForce(1, factor, 0.0)}
    windows = [skewed_window(i, table, hot=hot, ep=ep, factor=factor, dropped_share=dropped_share)
               for i in range(num_windows)]
    return pool_state(table, NUM_EXPERTS, windows, ep=ep, num_fresh_agents=ep if fresh is None else fresh,
                      in_force=in_force, **fields)


def routing_in_force(topk_group: int | None, changed_at: float | None) -> dict[str, KnobInForce]:
    """`PoolState.in_force` with the routing limit `topk_group` issued at `changed_at` (None: never changed,
    version 0)."""
    return {KnobKind.routing: KnobInForce(0 if changed_at is None else 1, topk_group, changed_at)}
