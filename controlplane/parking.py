"""Parking: a knob whose change was reverted stays where it is until its inputs change materially. Pure.

A change that did not have its intended effect (controlplane/effect.py), or that broke a floor, is
rolled back; trying it again after each cooldown would apply and revert the same change for ever (the
routing limit flapping 2 -> 3 -> 2 on the real runtime, a rolled-back placement re-applied every
cooldown). So the knob is parked for the pool, with the evidence, and the loop leaves it alone until
what the change was decided from is no longer the same: one definition for every knob, `material_change`.

Material: another model shape, another policy version, the token rate changed by `LOAD_RATE_FACTOR` either
way, or (for knobs that depend on which experts are hot: the placement) the expert-load distribution moved
by a total-variation distance of `LOAD_SHIFT` or more, mean over MoE layers; the load measured over the last
`LOAD_SPAN_SECONDS` of windows, at the park and now.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

import numpy as np

LOAD_RATE_FACTOR = 2.0
# the load is compared over the last minute of windows at least: two 2 s windows of a bursty pool (a prefill
# pool under Poisson arrivals) swing 2x by chance, which would lift a park every few windows
LOAD_SPAN_SECONDS = 60.0
# 0.1 of the routed tokens now go to other experts; the bundled model's code <-> prose swing is 0.17-0.23
# at its extremes (agents/runtime/README.md), so a full swing of the workload counts, sampling noise does not
LOAD_SHIFT = 0.1


@dataclass(frozen=True)
class KnobInputs:
    """What a knob's change was decided from. expert_share: [num_layers, num_experts], rows sum to 1 (None:
    the knob does not depend on which experts are hot); tokens_per_second: routed tokens the pool took."""

    model: str  # `model_key` of the model shape
    policy_version: int
    tokens_per_second: float | None
    expert_share: np.ndarray | None = None


@dataclass(frozen=True)
class Parked:
    """A knob parked for a pool: since when, by which action's verdict, why, and the inputs it was parked at."""

    knob: str
    since: float
    action_id: int | None
    reason: str
    inputs: KnobInputs


def model_key(model: dict) -> str:
    """A short stable fingerprint of a model shape (its JSON form)."""
    return hashlib.sha256(json.dumps(model, sort_keys=True).encode()).hexdigest()[:16]


def expert_share(expert_tokens: np.ndarray) -> np.ndarray:
    """[num_layers, num_experts] tokens -> each layer's distribution over its experts (rows sum to 1; an empty
    layer stays 0)."""
    tokens = np.asarray(expert_tokens, np.float64)
    return tokens / np.maximum(tokens.sum(axis=1, keepdims=True), 1.0)


def load_shift(a: np.ndarray, b: np.ndarray) -> float:
    """Mean over layers of the total-variation distance between two [num_layers, num_experts] distributions."""
    return float(0.5 * np.abs(a - b).sum(axis=1).mean())


def material_change(parked: KnobInputs, now: KnobInputs) -> str | None:
    """Why the inputs now differ materially from those a knob was parked at; None while they do not."""
    if now.model != parked.model:
        return "the model changed"
    if now.policy_version != parked.policy_version:
        return f"the policy changed (v{parked.policy_version} -> v{now.policy_version})"
    before, after = parked.tokens_per_second, now.tokens_per_second
    if before and after and max(before / after, after / before) >= LOAD_RATE_FACTOR:
        return f"the token rate moved from {before:.0f}/s to {after:.0f}/s"
    if parked.expert_share is not None and now.expert_share is not None \
            and parked.expert_share.shape == now.expert_share.shape:
        shift = load_shift(parked.expert_share, now.expert_share)
        if shift >= LOAD_SHIFT:
            return f"the expert load shifted (total-variation distance {shift:.2f} >= {LOAD_SHIFT})"
    return None
