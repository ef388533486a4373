"""What any pool-size actuator does: read a pool's replicas (and who else sets them), set them, and pick and
prepare the instances that go on a scale-down. On Kubernetes: actuate/kube.py (the scale subresource); an
actuator of the embedded deployment's local worker processes meets the same Protocol."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from controlplane.actuate.fence import Fence


@dataclass(frozen=True)
class PoolRef:
    deployment: str
    role: str

    def __str__(self) -> str:
        return f"{self.deployment}/{self.role}"


@dataclass(frozen=True)
class ScaleState:
    """A pool's scale as its platform reports it."""

    target: str  # what runs the pool, for people: "Deployment llm/decode"
    replicas: int  # instances asked for (spec)
    running: int | None  # instances the platform reports (status); None: not reported
    writer: str | None  # who set `replicas` last, when the platform tells (a Kubernetes field manager)
    is_ours: bool  # moectl set `replicas` last
    autoscalers: tuple[str, ...] = field(default=())  # other autoscalers of the pool: "HorizontalPodAutoscaler ns/x"
    num_ready: int | None = None  # replicas whose every pod is ready; None: not read
    num_unschedulable: int = 0  # replicas with a pod the scheduler cannot place (a full cluster): not starting
    unschedulable_reason: str = ""  # the scheduler's word: "0/128 nodes are available: 128 Insufficient ..."
    pods_per_replica: int = 1  # a LeaderWorkerSet group's size, a multi-node unit's pods
    gpus_per_replica: int = 0  # nvidia.com/gpu limits of one replica's pods; 0: none seen


class OtherWriter(Exception):
    """Someone else changed the replicas between our read and our write."""

    def __init__(self, state: ScaleState):
        super().__init__(f"{state.writer or 'another writer'} set {state.target} to {state.replicas} replicas")
        self.state = state


class PoolScaler(Protocol):
    def manages(self, pool: PoolRef) -> bool:
        """Whether this scaler knows where `pool` runs."""
        ...

    def read(self, pool: PoolRef) -> ScaleState:
        ...

    def set_replicas(self, pool: PoolRef, replicas: int, *, expected: int, fence: Fence) -> ScaleState:
        """Sets the replicas when they still are `expected` (what the decision read), checking `fence` before
        each write; a write that raced another is retried on a fresh read, a bounded number of times.
        Raises OtherWriter when the fresh read shows replicas someone else set."""
        ...

    def prepare_scale_down(self, pool: PoolRef, num_leaving: int, *, fence: Fence,
                           chosen: tuple[str, ...] = ()) -> list[str]:
        """Marks the instances that go when the pool shrinks by `num_leaving` so the platform removes them
        and no others; `chosen`: instances the caller drained (the pool planner), first. Returns them."""
        ...

    def report(self, pool: PoolRef, *, reason: str, message: str, is_warning: bool = False) -> None:
        """Tells the platform's users what moectl did or refused (a Kubernetes Event on the target)."""
        ...
