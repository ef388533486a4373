"""Parking: a knob whose change was reverted stays where it is until its inputs change materially. Pure.

A change that did not have its intended effect (controlplane/plan/effect.py), or that broke a floor, is
rolled back. Trying it again after each cooldown would apply and revert the same change for ever
(docs/decisions/2026-12-04-park-reverted-knobs.md). So the knob is parked for the pool, with the evidence. The
loop leaves it alone until what the change was decided from is no longer the same: one definition for every
knob, `material_change`.

Material: another model shape, another policy version, or the token rate changed by `LOAD_RATE_FACTOR` either
way. For knobs that depend on which experts are hot (the placement), also the expert-load distribution moved
by a total-variation distance of `LOAD_SHIFT` or more, mean over MoE layers. The load is measured over the last
`LOAD_SPAN_SECONDS` of windows (observed.py), at the park and now.
"""

from __future__ import annotations

import numpy as np

from controlplane.observed.knob_park import KnobInputs
from controlplane.observed.pool import PoolState

LOAD_RATE_FACTOR = 2.0
# 0.1 of the routed tokens now go to other experts; the bundled model's code <-> prose swing is 0.17-0.23
# at its extremes (agents/runtime/README.md), so a full swing of the workload counts, sampling noise does not
LOAD_SHIFT = 0.1


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


def material_reason(pool: PoolState, knob: str, *, with_expert_share: bool) -> tuple[str | None, str | None]:
    """(why the knob stays parked, why it no longer is): both None when it is not parked."""
    parked = pool.parked.get(knob)
    if parked is None:
        return None, None
    why = material_change(parked.inputs, pool.knob_inputs(with_expert_share=with_expert_share))
    if why is not None:
        return None, why
    return f"{knob} parked since action {parked.action_id}: {parked.reason} (until the model, the policy or the " \
           f"load changes)", None
