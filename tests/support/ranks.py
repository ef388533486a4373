"""Helpers for agent tests: an EP group of threads (no torch.distributed) and a sim model shape."""

from __future__ import annotations

import threading

from agents.protocol import Identity, ModelShape, Role
from agents.sim.engine import SimConfig

SIM_MODEL = ModelShape(name="sim-tiny", num_layers=4, num_experts=32, num_groups=4, top_k=4, topk_group=2)


class ThreadGroup:
    """Ranks in threads of one process; agree_max is an all-reduce(MAX) through a barrier."""

    def __init__(self, size: int):
        self.size = size
        self.barrier = threading.Barrier(size, timeout=30)
        self.values: list[list[int] | None] = [None] * size

    def rank(self, rank: int) -> ThreadRank:
        return ThreadRank(self, rank)


class ThreadRank:
    def __init__(self, group: ThreadGroup, rank: int):
        self.group, self.rank, self.size = group, rank, group.size

    def agree_max(self, values: list[int]) -> list[int]:
        self.group.values[self.rank] = list(values)
        self.group.barrier.wait()
        result = [max(column) for column in zip(*self.group.values, strict=True)]
        self.group.barrier.wait()  # nobody overwrites values before everyone has read them
        return result


def slots_per_rank(ep_size: int) -> int:
    return 40 // ep_size  # 32 experts and 8 spare slots for replicas


def sim_config(rank: int, ep_size: int, **overrides) -> SimConfig:
    return SimConfig(ep_size=ep_size, ep_rank=rank, slots_per_rank=slots_per_rank(ep_size), is_paced=False,
                     **overrides)


def identity(rank: int, ep_size: int, deployment: str = "tiny", role: Role = Role.decode) -> Identity:
    return Identity(deployment=deployment, instance=f"{deployment}-{role.value}-0", role=role, rank=rank,
                    ep_size=ep_size, slots_per_rank=slots_per_rank(ep_size), node="test-node", gpu_uuid=f"GPU-{rank}")
