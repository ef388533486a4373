"""A bound, not a planner: what any reactive planner could reach on the step trace, startup included.

`StepOracle` knows what no planner can (when the step comes and how high it goes) but is held to what
every planner must live with: it runs the sizes static provisioning picks for the low rate until the
first window that measured the step, then asks for every replica the GPU budget allows, the most
capacity that could be serving when its replicas are ready (startup, then warm-up), and goes back to
the low sizes at the first window after the fall. No measurement, forecast or step size can react
earlier or bigger, so its attainment bounds from above every planner that runs low-rate sizes before
an unforecast step; its GPU-hours are the price of that bound.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from benchmarks.baselines.static import StaticPools
from benchmarks.pdsim.simulator import SimConfig
from benchmarks.pdsim.trace import Trace
from controlplane.observed.serving import ROLES
from controlplane.solve.pools.decision import DecisionKind, PoolDecision
from controlplane.solve.pools.planning import PoolDecisions
from controlplane.solve.pools.view import PoolsView


@dataclass(frozen=True)
class StepOracle:
    low: dict  # role -> replicas before the step and after the fall
    high: dict  # role -> replicas from the first window that measured the step
    up_at: float  # seconds: that window's end
    down_at: float  # seconds: the end of the first window after the fall
    name: str = "oracle-step (bound)"

    def plan(self, view: PoolsView) -> PoolDecisions:
        sizes, why = (self.high, "oracle: the step measured") if self.up_at <= view.now < self.down_at else \
            (self.low, "oracle: low rate")
        return PoolDecisions(view.now, tuple(
            PoolDecision(view.now, role, view.pools[role].num_serving, sizes[role], DecisionKind.keep, why)
            for role in ROLES))

    @classmethod
    def for_step(cls, trace: Trace, config: SimConfig, max_replicas: int) -> StepOracle:
        """The step trace's low rate (its first third) sized as static provisioning sizes a peak; the high
        sizes fill the GPU budget, prefill first, as far as each pool's bound allows."""
        third = trace.seconds / 3
        first = trace.arrival < third
        low_part = Trace(trace.name, third, trace.arrival[first], trace.input_tokens[first],
                         trace.output_tokens[first], trace.rate[: int(third)])
        low = StaticPools.for_peak(low_part, replace(config, initial={}), max_replicas=max_replicas).sizes
        budget = config.gpu_budget if config.gpu_budget is not None else math.inf
        prefill = min(max_replicas, int(budget // 3))  # a third of the GPUs: prefill replicas are 1 GPU, decode 2
        decode = min(max_replicas, int((budget - prefill * config.cost.prefill_gpus) // config.cost.decode_gpus))
        window = config.window_seconds
        return cls(low, {"prefill": prefill, "decode": decode}, (math.floor(third / window) + 1) * window,
                   (math.floor(2 * third / window) + 1) * window)
