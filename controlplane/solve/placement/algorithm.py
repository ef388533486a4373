"""A placement algorithm is a named interface, as vLLM's AbstractEplbPolicy and SGLang's EplbAlgorithm are.

The planner calls one through `PlacementAlgorithm.solve`; `MigrationAware` (solve_placement, this package)
is the controller's. Baselines (benchmarks/baselines/) implement the same interface, so a benchmark or a test
compares them call for call, and a new algorithm needs no change to the planner.
Shapes: L layers, E experts, S slots.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np

from controlplane.solve.placement.solver import PlacementPlan, solve_placement
from controlplane.solve.placement.topology import Topology


@runtime_checkable
class PlacementAlgorithm(Protocol):
    name: str

    def solve(self, load: np.ndarray, topology: Topology, current: np.ndarray | None = None,
              max_moved_slots: int | None = None, *, group_locality: bool = False) -> PlacementPlan:
        """Plan slot -> expert for every layer. Pure.

        `load`: [L, E] tokens expected per expert.
        `current`: [L, S] applied table, or None for a fresh start.
        `max_moved_slots`: bound on slots that may differ from `current`.
        `group_locality`: keep each expert group's replicas on one node where the topology allows.
        An implementation that cannot
        honour an argument says so in its doc; the plan always reports what it moved and achieved.
        """
        ...


@dataclass(frozen=True)
class MigrationAware:
    """The controller's algorithm: starts from the applied table and moves only what pays (see
    `solve_placement` for the invariants it keeps and what tolerance and min_gain_per_move mean)."""

    name: str = "moectl"
    tolerance: float | None = None
    min_gain_per_move: float = 0.002

    def solve(self, load: np.ndarray, topology: Topology, current: np.ndarray | None = None,
              max_moved_slots: int | None = None, *, group_locality: bool = False) -> PlacementPlan:
        return solve_placement(load, topology, current, max_moved_slots, group_locality=group_locality,
                               tolerance=self.tolerance, min_gain_per_move=self.min_gain_per_move)
