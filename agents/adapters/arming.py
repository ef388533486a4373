"""Which placement a rearrange returns, so every EP rank returns the same one. Pure.

vLLM runs the policy on every rank at each rearrange (`EplbState.rearrange`, or its async worker), at the same
steps on every rank, and each rank must return the same map. A placement that arrives between two rearranges
could reach one rank's read before the next rearrange and another's after. So a placement is armed for the
rearrange after next (`from_call` = the newest call recorded + 2). By then every rank has long seen it, and the
ranks (within one call of each other) all pick the same entry: the newest armed one whose `from_call` has come.

Call numbers restart at 0 with every engine process, so an armed placement holds only in the engine's life that it
was armed for (its `epoch`, epoch.py), and only for the model it was armed for (`model`, state_dir.model_key: an
MTP drafter's layers are not the main model's; vLLM calls the policy once for each).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class ArmedPlacement:
    """version: the controller's placement version; from_call: the first rearrange (counted from 0 on each rank)
    that returns it; table: [num_moe_layers, num_replicas] logical expert per physical slot; epoch: the engine's
    life it holds in ('' in none); model: the model it is for ('<num_layers>x<num_experts>')."""

    version: int
    from_call: int
    table: np.ndarray
    epoch: str = ""
    model: str = ""


def arm_call(newest_recorded_call: int | None) -> int:
    """The rearrange a placement posted now takes effect at."""
    return (-1 if newest_recorded_call is None else newest_recorded_call) + 2


def in_force(armed: list[ArmedPlacement], call: int, *, epoch: str | None = None,
             model: str | None = None) -> ArmedPlacement | None:
    """The placement rearrange `call` (of the engine's life `epoch`, for `model`) returns: the newest (by from_call,
    then version) of that epoch and model whose from_call has come. epoch/model None: any."""
    due = [a for a in armed if a.from_call <= call and (epoch is None or a.epoch == epoch)
           and (model is None or a.model == model)]
    return max(due, key=lambda a: (a.from_call, a.version)) if due else None
