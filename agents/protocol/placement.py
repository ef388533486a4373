"""A placement (which logical expert each physical slot holds, per MoE layer) and the numbers it implies.

The one definition of replica counts, traffic shares, per-GPU load and imbalance. The controller's
solver, planner and observed windows, the agent's gauge and both simulators use it, so a measured
imbalance and a forecast one are the same number for the same load. NumPy only: the agent's runtime
keeps its own torch tables, and tests/contract pins them to these.

Shapes: L MoE layers, S slots (the whole EP group's), E logical experts, G GPUs (EP ranks). GPU g owns
the S/G consecutive slots g*S/G .. (g+1)*S/G - 1. Load is in tokens (token-expert assignments).

Imbalance is the straggler factor of an MoE step: per layer, the busiest GPU's load over the mean GPU's
load, averaged over layers. The rule for empty layers: a layer with no load has no straggler, so it is
left out of the mean; with no load in any layer nothing was measured, and `imbalance` is None. A caller
that needs a number says what it does with None.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


def default_slot_to_expert(num_layers: int, num_experts: int, num_slots: int) -> np.ndarray:
    """Placement version 0, before the controller decides: slot s holds expert s mod num_experts.

    Returns [L, S] int64; the first num_experts slots hold one copy of each expert.
    """
    return np.tile(np.arange(num_slots, dtype=np.int64) % num_experts, (num_layers, 1))


def _per_expert_sum(slot_to_expert: np.ndarray, num_experts: int, weights: np.ndarray | None) -> np.ndarray:
    """[L, E]: sum over each expert's slots of weights [L, S] (of 1 per slot when None)."""
    num_layers = slot_to_expert.shape[0]
    offsets = np.arange(num_layers)[:, None] * num_experts
    flat = np.bincount((slot_to_expert + offsets).ravel(), None if weights is None else weights.ravel(),
                       minlength=num_layers * num_experts)
    return flat.reshape(num_layers, num_experts)


def replica_counts(slot_to_expert: np.ndarray, num_experts: int) -> np.ndarray:
    """[L, S] table -> [L, E] int64 slots holding each expert (0 for an expert the table lacks)."""
    return _per_expert_sum(slot_to_expert, num_experts, None)


def even_share(slot_to_expert: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """[L, S] float64 1/replicas of each slot's expert: the split when no slot_share is given.

    counts: [L, E] `replica_counts` of the same table (passed in: hot loops keep it already).
    """
    return 1.0 / np.take_along_axis(counts, slot_to_expert, axis=1)


def effective_share(slot_to_expert: np.ndarray, slot_share: np.ndarray | None, num_experts: int) -> np.ndarray:
    """[L, S] float64 fraction of its expert's tokens each slot takes; per layer and expert they sum to 1.

    slot_share: [L, S] non-negative weights, normalised over each expert's replicas as the runtime's router
    does, or None for an even split. An expert whose weights sum to 0 splits evenly.
    """
    even = even_share(slot_to_expert, replica_counts(slot_to_expert, num_experts))
    if slot_share is None:
        return even
    totals = np.take_along_axis(_per_expert_sum(slot_to_expert, num_experts, slot_share), slot_to_expert, axis=1)
    return np.divide(slot_share, totals, out=even, where=totals > 0)


def slot_load(slot_to_expert: np.ndarray, expert_load: np.ndarray, share: np.ndarray) -> np.ndarray:
    """[L, S] float64 tokens each slot takes: its expert's load [L, E] times its effective share [L, S]."""
    return np.take_along_axis(np.asarray(expert_load, dtype=np.float64), slot_to_expert, axis=1) * share


def gpu_load(slot_load: np.ndarray, num_gpus: int) -> np.ndarray:
    """[L, S] tokens per slot -> [L, G] tokens per GPU (each GPU sums its S/G consecutive slots)."""
    num_layers, num_slots = slot_load.shape
    if num_gpus < 1 or num_slots % num_gpus:
        raise ValueError(f"{num_slots} slots do not split evenly over {num_gpus} GPUs")
    return slot_load.reshape(num_layers, num_gpus, num_slots // num_gpus).sum(axis=2)


def layer_imbalance(gpu_load: np.ndarray) -> np.ndarray:
    """[L, G] tokens per GPU -> [L] max/mean GPU load per layer; NaN for a layer with no load (module doc)."""
    mean = gpu_load.mean(axis=1)
    return np.divide(gpu_load.max(axis=1), mean, out=np.full(mean.shape, np.nan), where=mean > 0)


def mean_over_loaded(ratio: np.ndarray) -> float | None:
    """[L] per-layer max/mean, NaN for a layer without load -> their mean over loaded layers; None when none is."""
    is_loaded = ~np.isnan(ratio)
    return float(ratio[is_loaded].mean()) if is_loaded.any() else None


def imbalance(gpu_load: np.ndarray) -> float | None:
    """[L, G] tokens per GPU -> mean over loaded layers of max/mean GPU load; None when no layer has load."""
    return mean_over_loaded(layer_imbalance(gpu_load))


@dataclass(frozen=True)
class PlacementTable:
    """One placement of an EP group, as the controller issues it and the agents run it.

    slot_to_expert: [L, S] int64 logical expert each slot holds.
    slot_share: [L, S] float64 weights of an expert's tokens over its replicas (normalised by
        `effective_share`); None: even split.
    version: the placement version (0: `default`, before the controller decides).
    """

    slot_to_expert: np.ndarray
    slot_share: np.ndarray | None = None
    version: int = 0

    def __post_init__(self) -> None:
        table = np.asarray(self.slot_to_expert, dtype=np.int64)
        if table.ndim != 2:
            raise ValueError(f"slot_to_expert must be [num_layers, num_slots], got shape {table.shape}")
        object.__setattr__(self, "slot_to_expert", table)
        if self.slot_share is not None:
            share = np.asarray(self.slot_share, dtype=np.float64)
            if share.shape != table.shape or (share < 0).any():
                raise ValueError(f"slot_share must be non-negative and shaped like slot_to_expert {table.shape}")
            object.__setattr__(self, "slot_share", share)

    @classmethod
    def default(cls, num_layers: int, num_experts: int, num_slots: int) -> PlacementTable:
        return cls(default_slot_to_expert(num_layers, num_experts, num_slots))

    def replica_counts(self, num_experts: int) -> np.ndarray:
        """[L, E] int64 slots holding each expert."""
        return replica_counts(self.slot_to_expert, num_experts)

    def effective_share(self, num_experts: int) -> np.ndarray:
        """[L, S] fraction of its expert's tokens each slot takes."""
        return effective_share(self.slot_to_expert, self.slot_share, num_experts)

    def slot_load(self, expert_load: np.ndarray) -> np.ndarray:
        """expert_load: [L, E] tokens -> [L, S] tokens each slot takes under this placement."""
        return slot_load(self.slot_to_expert, expert_load, self.effective_share(np.shape(expert_load)[1]))

    def gpu_load(self, expert_load: np.ndarray, num_gpus: int) -> np.ndarray:
        """expert_load: [L, E] tokens -> [L, G] float64 tokens per GPU under this placement."""
        return gpu_load(self.slot_load(expert_load), num_gpus)

    def imbalance(self, expert_load: np.ndarray, num_gpus: int) -> float | None:
        """Mean over loaded layers of max/mean GPU load for expert_load [L, E]; None without load."""
        return imbalance(self.gpu_load(expert_load, num_gpus))
