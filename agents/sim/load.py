"""Skewed, slowly drifting per-expert load, as fine-grained MoE routers produce it.

Each layer has a Zipf-like popularity over its experts with its own exponent and its own hot
experts (a random permutation), so hot experts persist; a lognormal walk moves hotness slowly,
never in jumps. With a swing period, two kinds of text (say code and prose), each with its own hot
experts, mix by a slow cosine of the clock, so the hot set also moves as the workload's mix does.

Within a window, steps are burstier than the window's mean: a batch holds a few requests whose tokens route
alike, so with `step_sigma` each step's popularity is the window's times an independent lognormal factor per
expert (`route_steps`). That per-step surprise is what a dispatch-time split (agents/protocol/replica_split.py)
absorbs and a per-window placement cannot. Calibrated presets and the stress cases: agents/sim/workloads.py.

The popularity draws only from the model's own generator: two models with the same seed that drift
the same number of times agree exactly, which is how the ranks of one EP group see the same load.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np


@dataclass
class LoadModel:
    num_layers: int
    num_experts: int
    top_k: int
    seed: int = 0
    drift_sigma: float = 0.03  # lognormal step of the walk, per drift()
    swing_period_seconds: float | None = None  # None: one kind of text, no swing
    min_exponent: float = 0.9
    max_exponent: float = 1.3
    step_sigma: float = 0.0  # lognormal per-expert factor of one step's popularity over the window's (route_steps)
    rng: np.random.Generator = field(init=False)
    kinds: list[np.ndarray] = field(init=False)  # [num_layers, num_experts] profile per kind of text
    walk: np.ndarray = field(init=False)  # [num_layers, num_experts], mean 1 per layer

    def __post_init__(self) -> None:
        self.rng = np.random.default_rng(self.seed)
        self.kinds = [self._zipf_profile() for _ in range(1 if self.swing_period_seconds is None else 2)]
        self.walk = np.ones((self.num_layers, self.num_experts))

    def _zipf_profile(self) -> np.ndarray:
        exponents = self.rng.uniform(self.min_exponent, self.max_exponent, self.num_layers)
        ranks = np.arange(1, self.num_experts + 1, dtype=np.float64)
        weights = ranks[None, :] ** -exponents[:, None]
        return np.stack([row[self.rng.permutation(self.num_experts)] for row in weights])

    def popularity(self, now: float = 0.0) -> np.ndarray:
        """[num_layers, num_experts], rows sum to 1: the kinds mixed by the swing at `now` (seconds), times
        the walk."""
        weights = self.kinds[0]
        if self.swing_period_seconds is not None:
            mix = 0.5 - 0.5 * math.cos(2 * math.pi * now / self.swing_period_seconds)
            weights = (1 - mix) * self.kinds[0] + mix * self.kinds[1]
        weights = weights * self.walk
        return weights / weights.sum(axis=1, keepdims=True)

    def drift(self) -> None:
        self.walk *= self.rng.lognormal(0.0, self.drift_sigma, self.walk.shape)
        self.walk /= self.walk.mean(axis=1, keepdims=True)

    def route(self, popularity: np.ndarray, num_tokens: int, rng: np.random.Generator | None = None) -> np.ndarray:
        """popularity [num_layers, num_experts] -> the token-expert pairs `num_tokens` tokens route (top_k each),
        drawn from `rng` (default: the model's own; a rank passes its own so the popularity stays shared)."""
        rng = self.rng if rng is None else rng
        return np.stack([rng.multinomial(num_tokens * self.top_k, p) for p in popularity])

    def route_steps(self, popularity: np.ndarray, num_steps: int, tokens_per_step: float,
                    rng: np.random.Generator) -> np.ndarray:
        """popularity [num_layers, num_experts] -> [num_steps, num_layers, num_experts] int64 token-expert pairs of
        `num_steps` steps of `tokens_per_step` tokens (top_k each): Poisson counts around each step's popularity,
        the window's times the step's lognormal factor (`step_sigma`; none at 0). Draws only from `rng`."""
        shape = (num_steps, *popularity.shape)
        step = popularity * (rng.lognormal(0.0, self.step_sigma, shape) if self.step_sigma > 0 else np.ones(shape))
        step = step / step.sum(axis=-1, keepdims=True)
        return rng.poisson(step * tokens_per_step * self.top_k).astype(np.int64)
