"""Dynamo's load-based scaling loop (`core/load_scaling.py`, notes section 1.5), every window.

1-D regressions of engine step time on the last `max_samples` per-engine samples (prefill: prompt
tokens per step; decode: KV tokens), at least `min_observations` of them. +1 when every engine's
estimated TTFT (its queue prefilled in chunks of max_num_batched_tokens, then its own prompt) or ITL
is over target; -1 only when consolidation is safe (prefill: the queue x N/(N-1) keeps the
queue-induced TTFT under `down_sensitivity` of what the target leaves after the prompt's own prefill;
decode: KV x N/(N-1) fits and keeps ITL under `down_sensitivity` x target). Seconds, tokens.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field

import numpy as np

from controlplane.observed.serving import ROLES
from controlplane.solve.pools.view import PoolsView


class StepRegression:
    """Step seconds against one load variable, over the last `max_samples` engine samples."""

    def __init__(self, max_samples: int = 64, min_observations: int = 5) -> None:
        self.samples: deque = deque(maxlen=max_samples)
        self.min_observations = min_observations

    def add(self, load: float, seconds: float) -> None:
        self.samples.append((load, seconds))

    def fit(self) -> tuple[float, float] | None:
        """(seconds at no load, seconds per unit of load), or None with too few samples."""
        if len(self.samples) < self.min_observations:
            return None
        x, y = np.array(self.samples).T
        if np.ptp(x) == 0:
            return float(y.mean()), 0.0
        slope, intercept = np.polyfit(x, y, 1)
        return max(float(intercept), 0.0), max(float(slope), 0.0)


@dataclass
class LoadLoop:
    ttft_target: float  # seconds
    itl_target: float  # seconds
    max_num_batched_tokens: int
    down_sensitivity: float = 0.8  # load_scaling_down_sensitivity, 80 %
    regressions: dict = field(default_factory=lambda: {role: StepRegression() for role in ROLES})

    def step(self, view: PoolsView) -> dict:
        """role -> -1, 0 or +1 from the latest window's engines."""
        latest, out = view.latest, {}
        isl = latest.mean_input_tokens or 0.0
        osl = latest.mean_output_tokens or 0.0
        for role in ROLES:
            engines = [r for r in latest.of_role(role) if r.num_steps]
            for r in engines:
                load = r.prefill_tokens / r.num_steps if role == "prefill" else r.kv_tokens
                self.regressions[role].add(load, r.busy_seconds / r.num_steps)
            fit = self.regressions[role].fit()
            n = view.pools[role].num_ready
            if fit is None or not engines or n == 0:
                out[role] = 0
                continue
            base, per_unit = fit
            if role == "prefill":
                def ttft(queued: float, base=base, per_unit=per_unit) -> float:
                    tokens = queued + isl
                    return math.ceil(tokens / self.max_num_batched_tokens) * base + per_unit * tokens
                own = ttft(0.0)
                is_up = all(ttft(r.queued_tokens) > self.ttft_target for r in engines)
                is_down = n > 1 and all(ttft(r.queued_tokens * n / (n - 1)) - own
                                        < (self.ttft_target - own) * self.down_sensitivity
                                        for r in engines)
            else:
                def kv(r) -> float:
                    return r.kv_tokens + r.num_waiting * (isl + osl)
                is_up = all(base + per_unit * kv(r) > self.itl_target for r in engines)
                is_down = n > 1 and all(kv(r) * n / (n - 1) < r.kv_capacity_tokens and base + per_unit * kv(r) * n
                                        / (n - 1) < self.itl_target * self.down_sensitivity
                                        for r in engines)
            out[role] = 1 if is_up else -1 if is_down else 0
        return out
