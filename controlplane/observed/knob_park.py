"""A knob parked for a pool after a rolled-back change (`Parked`), with the inputs it was parked at
(`KnobInputs`): the park stands until they change materially (controlplane/plan/parking.py). Pure."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class KnobInputs:
    """What a knob's change was decided from. expert_share: [num_layers, num_experts], rows sum to 1 (None:
    the knob does not depend on which experts are hot); tokens_per_second: routed tokens the pool took."""

    model: str  # `model_key` of the model shape
    policy_version: int
    tokens_per_second: float | None
    expert_share: np.ndarray | None = None


@dataclass(frozen=True)
class FailedTry:
    """One reverted change of the knob: when it was applied, the inputs it was decided from, and its effect on its
    signal as predicted and as measured (the signal's unit, signed the same way)."""

    at: float
    inputs: KnobInputs
    predicted: float
    realised: float

    @property
    def realised_share(self) -> float:
        return self.realised / self.predicted if self.predicted else 0.0


@dataclass(frozen=True)
class Parked:
    """A knob parked for a pool: since when, by which action's verdict, why, and the inputs it was parked at."""

    knob: str
    since: float
    action_id: int | None
    reason: str
    inputs: KnobInputs
    tries: tuple[FailedTry, ...] = ()  # the knob's reverted changes on the pool, oldest first (this one last)


def model_key(model: dict) -> str:
    """A short stable fingerprint of a model shape (its JSON form)."""
    return hashlib.sha256(json.dumps(model, sort_keys=True).encode()).hexdigest()[:16]
