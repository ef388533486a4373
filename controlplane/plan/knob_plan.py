"""One knob's part of a pool's plan, behind one interface (`KnobPlan`), pure. Each knob's planner module ends with
its `KnobPlan` (plan/placement.py, plan/routing_limit.py, plan/capacity_factor.py, plan/pool_plan.py); the
registry (plan/knob_plans.py) lists them, and the pass's decide (plan/decisions.py), its proposals
(loop/proposals.py) and its verification (loop/verify.py) loop over it instead of naming knobs.

What a knob's module gives: its decision on what the pass read (`decide`), the moves that decision asks for as
their actions will record them (`moves`), and how a change of it is judged: on which windows (`judged_windows`),
its effect restated on the load it met (`restate`), and the effect asked of a change nobody predicted
(`unplanned_effect`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from controlplane.config import Settings
from controlplane.desired import Effect, KnobKind, Policy
from controlplane.observed.pool import PoolState
from controlplane.observed.window import Window
from controlplane.plan.diagnose import MtpDiagnosis
from controlplane.plan.pool_inputs import PoolInputs


@dataclass(frozen=True)
class Given:
    """What one knob's decision is made on: the pass's inputs, and the decisions of the knobs planned before it
    (`earlier`: kind -> its decision, the registry's order)."""

    policy: Policy
    inputs: PoolInputs
    settings: Settings
    now: float
    mtp: MtpDiagnosis | None  # why MTP acceptance is under its floor, if it is
    earlier: dict[KnobKind, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Move:
    """What a decision asks to change, as its action will record it (loop/proposals.py adds who asked)."""

    kind: KnobKind
    value: object  # the knob's new value: a PlacementTable, a group limit, replicas, tokens, a factor
    reason: str
    inputs: dict  # what the decision read
    predicted: dict  # what the change should do, its effect under "effect" where it has one
    summary: str  # the log line: the knob's move in words


def since_change(kind: KnobKind, version: int, state: PoolState) -> list[Window] | None:
    """A one-number knob's change is judged on the windows from its issue on; None when a later one replaced it."""
    if version != state.knob(kind).version:
        return None
    return state.windows_since_change(kind)


@dataclass(frozen=True)
class KnobPlan:
    """One knob's planner. kind: the knob it decides (the registry's key; its moves may name others, as the pool
    plan's names the local-prefill threshold). decide: its decision, None where it is not planned this pass.
    moves: (decision, policy, state, role) -> what changes. judged_windows: (kind, version, state) -> the windows a
    change is judged on (None: replaced before it was measured). restate: (effect, value before, value after,
    windows, num_gpus) -> the effect on the load the change met (None: as planned). unplanned_effect: (the action's
    inputs, policy) -> what a change nobody predicted must at least do. is_judged: False where the loop does not
    judge its changes (a pool size is verified once the platform runs it, actuate/scale.py). with_expert_share: its
    parks compare the experts' shares of the load (plan/parking.py)."""

    kind: KnobKind
    decide: Callable[[Given], Any]
    moves: Callable[[Any, Policy, PoolState, str], list[Move]]
    judged_windows: Callable[[KnobKind, int, PoolState], list[Window] | None] = since_change
    restate: Callable[[Effect, Any, Any, list[Window], int], Effect | None] | None = None
    unplanned_effect: Callable[[dict, Policy], Effect | None] = lambda inputs, policy: None
    is_judged: bool = True
    with_expert_share: bool = False
