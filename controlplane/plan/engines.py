"""A deployment's engine (bundled, sglang, vllm) and what it can apply: the planner's rails follow from it. Pure.

1. `bundled`: moectl's runtime. Its agents switch placement at a step the EP group agrees on, live.
2. `sglang`: the sidecar writes an --init-expert-location file and restarts the group. SGLang 0.5.23 has no
   request that replaces its map while serving (agents/adapters/sglang/restart.py). Each change is a restart of
   every group of the pool: its weights reload and its KV cache is lost, minutes of capacity. So changes come no
   closer than `MIN_RESTART_SECONDS` and at most `MAX_RESTARTS_PER_HOUR` an hour, counted against the policy's own
   rails (the tighter wins). A restart reloads every weight whatever moved, so the moves budget does not bind a
   change: its cost is the restart, counted as an action.
3. `vllm`: the plugin arms the placement for the rearrange after next. vLLM moves the weights itself (no restart),
  no sooner than its rearrange interval: changes closer than that would be skipped by the engine.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from controlplane.desired import Policy

EngineName = Literal["bundled", "sglang", "vllm"]
ENGINES: tuple[EngineName, ...] = ("bundled", "sglang", "vllm")

MIN_RESTART_SECONDS = 600.0
MAX_RESTARTS_PER_HOUR = 4
VLLM_MIN_CHANGE_SECONDS = 120.0  # one vLLM rearrange interval: its default 3000 steps at ~25 steps/s


@dataclass(frozen=True)
class EngineRails:
    """How an engine applies a placement: is_restart (a change restarts the group), min_change_seconds between
    changes, max_changes_per_hour (None: the policy's alone)."""

    applies: str
    is_restart: bool
    min_change_seconds: float
    max_changes_per_hour: int | None


RAILS: dict[str, EngineRails] = {
    "bundled": EngineRails("live, at a step the EP group agrees on", False, 0.0, None),
    "sglang": EngineRails("restart per change (--init-expert-location)", True, MIN_RESTART_SECONDS,
                          MAX_RESTARTS_PER_HOUR),
    "vllm": EngineRails("at vLLM's rearrange after next (EPLB policy plugin)", False, VLLM_MIN_CHANGE_SECONDS, None),
}


def engine_policy(policy: Policy, engine: str) -> Policy:
    """The policy the planner applies to a pool of `engine`: the tighter of the policy's and the engine's rails."""
    rails = RAILS.get(engine, RAILS["bundled"])
    update: dict = {}
    if rails.min_change_seconds > policy.cooldown_seconds:
        update["cooldown_seconds"] = rails.min_change_seconds
    if rails.max_changes_per_hour is not None and rails.max_changes_per_hour < policy.max_actions_per_hour:
        update["max_actions_per_hour"] = rails.max_changes_per_hour
    if rails.is_restart:  # a restart reloads every weight: the change's cost is the restart, not its moves
        update["max_moved_slots_fraction"] = 1.0
        update["max_moved_slots_per_hour_fraction"] = max(policy.max_moved_slots_per_hour_fraction,
                                                          float(rails.max_changes_per_hour or 1))
    return policy.model_copy(update=update) if update else policy
