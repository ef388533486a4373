"""Expert placement: which logical expert each physical slot holds, per MoE layer.

Public and stable (the controller, the simulator and benchmarks call it): `PlacementPlan`, `solve_placement`, and
`plan_of`, which any algorithm (solve/placement/algorithm.py) uses to report a table; the group's shape is
solve/placement/topology.py `Topology`. Per-GPU load and imbalance of any table are the wire contract's
(agents/protocol/placement.py), so a plan's forecast and a window's measurement are the same number.
Shapes: L = num_layers, E = num_experts, S = num_slots, G = num_gpus. Load is in tokens.
Invariants of every plan `solve_placement` returns: each expert has >= 1 replica, no GPU holds two
replicas of one expert, and each expert's slot shares sum to 1.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from agents.protocol.placement import PlacementTable, imbalance
from controlplane.solve.placement.construct import solve_fresh
from controlplane.solve.placement.incremental import solve_incremental
from controlplane.solve.placement.locality import group_to_node_of, is_feasible, mean_nodes_per_group
from controlplane.solve.placement.shares import water_fill
from controlplane.solve.placement.topology import Topology


@dataclass(frozen=True)
class PlacementPlan:
    """A solved placement and what it is predicted to do.

    `slot_to_expert`: [L, S] int64 logical expert held by each slot.
    `slot_share`: [L, S] float64 fraction of its expert's tokens each slot takes: > 0, summing to 1 per
        expert and layer. Uneven where a replica on a lighter GPU can take more (see `shares`).
    `gpu_load`: [L, G] float64 predicted tokens per GPU.
    `imbalance`: mean over loaded layers of max/mean GPU load. None when the load is all zero (the rule
        of agents/protocol/placement.py).
    `num_moved_slots`: slots whose expert differs from `current` (0 without a current table).
    `moved_slots`: [M, 2] int64 (layer, slot) pairs that change, i.e. the weights to transfer.
    `is_group_local`: every layer keeps each group's replicas on one node (asked for and achieved).
    `mean_nodes_per_group`: nodes a group's replicas span, mean over layers and groups. It is what
        locality bounds (1.0 = local) and the cross-node traffic the plan risks under group routing.
    `objective`: what the table was chosen to minimise. "window_mean" (the default) is the max/mean of the
        window's mean load. "step_split" is the per-step LP optimum of a pool running the dispatch-time split
        (solve/placement/step_split.py).
    `step_imbalance`: under "step_split", the plan's sampled per-step score (busiest GPU over mean, split); None
        otherwise.
    """

    slot_to_expert: np.ndarray
    slot_share: np.ndarray
    gpu_load: np.ndarray
    imbalance: float | None
    num_moved_slots: int
    moved_slots: np.ndarray
    is_group_local: bool = False
    mean_nodes_per_group: float = 1.0
    objective: str = "window_mean"
    step_imbalance: float | None = None


def _validate(load, topology: Topology, current, max_moved_slots) -> tuple[np.ndarray, np.ndarray | None]:
    if not isinstance(topology, Topology):
        raise ValueError(f"topology must be a Topology, got {type(topology).__name__}")
    load = np.asarray(load)
    if load.ndim != 2 or load.shape[0] < 1 or load.shape[1] < 1:
        raise ValueError(f"load must be [num_layers, num_experts] with both >= 1, got shape {load.shape}")
    if not np.issubdtype(load.dtype, np.number) or np.issubdtype(load.dtype, np.complexfloating):
        raise ValueError(f"load must be real numbers, got dtype {load.dtype}")
    load = load.astype(np.float64)
    if not np.isfinite(load).all():
        raise ValueError("load must be finite (no NaN or inf)")
    if (load < 0).any():
        raise ValueError("load must be non-negative tokens")
    num_experts = load.shape[1]
    if topology.num_slots < num_experts:
        raise ValueError(f"{topology.num_slots} slots cannot hold {num_experts} experts "
                         "(need slots >= experts)")
    if topology.num_slots > num_experts * topology.num_gpus:
        raise ValueError(f"{topology.num_slots} slots need more than one replica of an expert per GPU "
                         f"({num_experts} experts x {topology.num_gpus} GPUs)")
    if max_moved_slots is not None and (isinstance(max_moved_slots, bool) or int(max_moved_slots) < 0):
        raise ValueError(f"max_moved_slots must be None or >= 0, got {max_moved_slots!r}")
    if current is None:
        return load, None
    current = np.asarray(current)
    if current.shape != (load.shape[0], topology.num_slots):
        raise ValueError(f"current must be [num_layers, num_slots] = {(load.shape[0], topology.num_slots)}, "
                         f"got {current.shape}")
    if not np.issubdtype(current.dtype, np.integer):
        raise ValueError(f"current must hold integer expert ids, got dtype {current.dtype}")
    if current.size and (current.min() < 0 or current.max() >= num_experts):
        raise ValueError(f"current expert ids must lie in 0..{num_experts - 1}")
    return load, current.astype(np.int64)


def solve_placement(load, topology: Topology, current=None, max_moved_slots: int | None = None, *,
                    group_locality: bool = False, tolerance: float | None = None,
                    min_gain_per_move: float = 0.002) -> PlacementPlan:
    """Plan slot -> expert for every layer.

    `load`: [L, E] tokens expected per expert in the coming windows.
    `current`: [L, S] int applied table, or None for a fresh start. With it, the solver starts from
        `current` and moves only what pays, so a small drift costs few moves.
    `max_moved_slots`: bound on slots (over all layers) whose expert may differ from `current`.
        It is exceeded only to repair a `current` that breaks an invariant (missing expert, duplicate).
    `group_locality`: keep each group's replicas on one node. This needs E % G == 0, G % N == 0 and a
        node's slots to fit its experts; otherwise the layer is solved globally, as EPLB does, and the plan
        says so. With `current`, a layer not yet local is relocated only if the budget allows.
    `tolerance`: a layer within this of perfect max/mean is left alone. Default 0.001 fresh, 0.01
        with `current` (moving weights stalls serving; 1% is not worth it).
    `min_gain_per_move`: with `current`, each moved slot must lower its layer's max GPU load by at
        least this fraction of the layer's mean.
    """
    load, current = _validate(load, topology, current, max_moved_slots)
    is_local = group_locality and is_feasible(load.shape[1], topology.num_slots, topology.num_groups,
                                              topology.num_nodes, topology.gpus_per_node)
    if current is None:
        table = solve_fresh(load, topology, is_local, 0.001 if tolerance is None else tolerance)
        share = water_fill(table, load, topology.slots_per_gpu)
    else:
        table, share = solve_incremental(load, topology, current, max_moved_slots, is_local,
                                         0.01 if tolerance is None else tolerance, min_gain_per_move)
    return plan_of(table, share, load, topology, current, is_group_local=is_local)


def plan_of(table: np.ndarray, share: np.ndarray | None, load: np.ndarray, topology: Topology,
            current: np.ndarray | None = None, *, is_group_local: bool = False) -> PlacementPlan:
    """The plan of any solved table [L, S] for load [L, E] tokens: what it is predicted to do and move.

    `share`: [L, S] slot_share, or None for an even split.
    `is_group_local`: locality was asked for. The plan says so only if the table keeps every group's replicas
    on one node.
    """
    placement = PlacementTable(table, share)
    gpu_load = placement.gpu_load(load, topology.num_gpus)
    moved = np.argwhere(table != current) if current is not None else np.empty((0, 2), dtype=np.int64)
    num_experts = load.shape[1]
    is_group_local = is_group_local and bool((group_to_node_of(table, num_experts, topology.num_groups,
                                                               topology.num_nodes) >= 0).all())
    return PlacementPlan(slot_to_expert=placement.slot_to_expert,
                         slot_share=placement.effective_share(num_experts) if share is None else share,
                         gpu_load=gpu_load, imbalance=imbalance(gpu_load), num_moved_slots=len(moved),
                         moved_slots=moved.astype(np.int64), is_group_local=is_group_local,
                         mean_nodes_per_group=mean_nodes_per_group(table, num_experts, topology.num_groups,
                                                                   topology.num_nodes))
