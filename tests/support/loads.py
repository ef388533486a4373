"""The one test load generator: expert loads of a Zipf shape, the hot experts drawn anew in each layer."""

from __future__ import annotations

import numpy as np


def zipf_load(num_layers: int, num_experts: int, exponent: float | np.ndarray, seed: int = 0,
              scale: float = 1e4) -> np.ndarray:
    """[num_layers, num_experts] tokens: the expert of popularity rank r (1 the hottest) gets scale * r^-exponent,
    the ranks a fresh permutation per layer; `exponent` one for all layers or [num_layers, 1], one per layer."""
    rng = np.random.default_rng(seed)
    ranks = np.stack([rng.permutation(num_experts) + 1 for _ in range(num_layers)])
    return scale * ranks.astype(float) ** -exponent
