"""One EP group's shape (`Topology`): nodes, GPUs, slots, expert groups. The type at the bottom of
solve/placement: every solver module may import it, it imports none of them."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Topology:
    """One EP group. GPU g owns slots g*slots_per_gpu .. (g+1)*slots_per_gpu-1; node n owns
    GPUs n*gpus_per_node .. (n+1)*gpus_per_node-1. num_groups: router expert groups (experts
    are split into num_groups consecutive blocks)."""

    num_nodes: int
    gpus_per_node: int
    slots_per_gpu: int
    num_groups: int = 1

    def __post_init__(self) -> None:
        for name in ("num_nodes", "gpus_per_node", "slots_per_gpu", "num_groups"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 1:
                raise ValueError(f"Topology.{name} must be a positive int, got {value!r}")

    @property
    def num_gpus(self) -> int:
        return self.num_nodes * self.gpus_per_node

    @property
    def num_slots(self) -> int:
        return self.num_gpus * self.slots_per_gpu
