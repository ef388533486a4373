"""What a worker rank's engine loop needs from its engine, beyond what the agent needs: stepping in lockstep
with its EP group, taking requests, and whether it can hand a request's KV off to another engine."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from agents.runtime.ep import EPGroup
from agents.runtime.sequence import SamplingParams
from agents.runtime.stats import RequestOutput, StepStats
from agents.telemetry.engine import AgentEngine


@runtime_checkable
class ServingEngine(AgentEngine, Protocol):
    group: EPGroup
    is_group_idle: bool  # no rank of the group had work at the last step
    can_hand_off_kv: bool  # agents/runtime/kv_transfer.py can export and import its requests' KV

    def step(self) -> tuple[list[RequestOutput], StepStats]:
        """One step of the whole group (every rank calls it in lockstep): outputs and the step's stats."""
        ...

    def add_request(self, prompt: str | list[int], params: SamplingParams | None = None,
                    request_id: str | None = None) -> str:
        """Queues a request; raises ValueError for one the engine cannot take (duplicate id, too long)."""
        ...
