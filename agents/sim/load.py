"""Skewed, slowly drifting per-expert load, as fine-grained MoE routers produce it.

Each layer has a Zipf-like popularity over its experts with its own exponent and its own hot
experts (a random permutation), so hot experts persist; popularity drifts by a small lognormal
step each window, so hotness moves slowly, never jumps.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass
class LoadModel:
    num_layers: int
    num_experts: int
    top_k: int
    seed: int = 0
    min_exponent: float = 0.9
    max_exponent: float = 1.3
    drift_sigma: float = 0.03
    rng: np.random.Generator = field(init=False)
    popularity: np.ndarray = field(init=False)  # [num_layers, num_experts], rows sum to 1

    def __post_init__(self) -> None:
        self.rng = np.random.default_rng(self.seed)
        exponents = self.rng.uniform(self.min_exponent, self.max_exponent, self.num_layers)
        ranks = np.arange(1, self.num_experts + 1, dtype=np.float64)
        weights = ranks[None, :] ** -exponents[:, None]
        for layer in range(self.num_layers):
            weights[layer] = weights[layer, self.rng.permutation(self.num_experts)]
        self.popularity = weights / weights.sum(axis=1, keepdims=True)

    def drift(self) -> None:
        step = self.rng.lognormal(0.0, self.drift_sigma, self.popularity.shape)
        drifted = self.popularity * step
        self.popularity = drifted / drifted.sum(axis=1, keepdims=True)

    def route(self, num_tokens: int) -> np.ndarray:
        """[num_layers, num_experts] tokens routed to each expert by num_tokens tokens (top_k each)."""
        return np.stack([self.rng.multinomial(num_tokens * self.top_k, p) for p in self.popularity])
