"""What the agent needs from the engine it is embedded in: the placement and routing limits it runs, and
a way to stage new ones. The bundled runtime's Engine (agents/runtime/engine.py) and the simulated engine
(agents/sim/engine.py) both meet it; so can any engine that switches at a step its EP group agrees on."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from agents.runtime.placement import EngineRoutingLimits, Placement


@dataclass(frozen=True)
class RuntimeInfo:
    """What the agent is told of its engine's configuration, beside the model it serves."""

    name: str = "moectl-runtime"  # the `runtime` label of the agent's info metric
    num_speculative_tokens: int = 0  # MTP draft tokens per step (0: no MTP)
    max_batched_tokens: int | None = None  # tokens a step batches at most: the base of the expert capacity


@runtime_checkable
class AgentEngine(Protocol):
    @property
    def placement(self) -> Placement:
        """The placement the engine runs now (not one staged)."""
        ...

    @property
    def routing_limits(self) -> EngineRoutingLimits:
        """The routing limits the engine runs now."""
        ...

    @property
    def pending_limits(self) -> EngineRoutingLimits | None:
        """Routing limits staged and not yet switched to."""
        ...

    def apply_placement(self, placement: Placement) -> None:
        """Stages `placement`; raises ValueError if it does not fit the model. The engine switches at the
        first step where every rank of its group staged the same version."""
        ...

    def apply_routing_limits(self, limits: EngineRoutingLimits) -> None:
        """Stages `limits` like a placement; raises ValueError if they do not fit the model."""
        ...
