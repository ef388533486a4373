"""Static provisioning: the pools sized once and never changed, behind the pool planner interface.

`StaticPools.for_peak` sizes them for the trace's peak the way an operator would with a load test:
replay the peak rate (the highest 5-minute mean) as steady Poisson traffic, with the lengths of the
requests of that peak, and take the fewest replicas per pool that meet every SLO target there (prefill
searched with decode generous, then decode at that prefill). The search runs the simulator, so
static provisioning is measured on the same system it is judged on.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from benchmarks.pdsim.outcome import meets_targets
from benchmarks.pdsim.simulator import SimConfig, simulate
from benchmarks.pdsim.trace import Trace
from controlplane.observed.serving import ROLES
from controlplane.solve.pools.decision import DecisionKind, PoolDecision
from controlplane.solve.pools.planning import PoolDecisions
from controlplane.solve.pools.view import PoolsView

PEAK_SECONDS = 300  # the span the peak rate is averaged over
PROBE_SECONDS = 300  # length of each steady-load probe


@dataclass
class StaticPools:
    sizes: dict  # role -> replicas
    name: str = "static-peak"

    def plan(self, view: PoolsView) -> PoolDecisions:
        return PoolDecisions(view.now, tuple(
            PoolDecision(view.now, role, view.pools[role].num_serving, self.sizes[role], DecisionKind.keep,
                         "static: sized once for the peak") for role in ROLES))

    @classmethod
    def for_peak(cls, trace: Trace, config: SimConfig, max_replicas: int = 32, seed: int = 0) -> StaticPools:
        probe = peak_probe(trace, seed)

        def meets(prefill: int, decode: int) -> bool:
            sizes = {"prefill": prefill, "decode": decode}
            result = simulate(probe, cls(sizes), replace(config, initial=sizes))
            return meets_targets(result, config.targets, skip_seconds=60.0)

        prefill = next(p for p in range(1, max_replicas + 1) if meets(p, max_replicas))
        decode = next(d for d in range(1, max_replicas + 1) if meets(prefill, d))
        return cls({"prefill": prefill, "decode": decode})


def peak_probe(trace: Trace, seed: int) -> Trace:
    """Steady Poisson traffic at the trace's peak rate, lengths resampled from the requests of its peak span."""
    rng = np.random.default_rng(seed)
    start, rate = trace.peak(PEAK_SECONDS)
    during = np.flatnonzero((trace.arrival >= start) & (trace.arrival < start + PEAK_SECONDS))
    count = rng.poisson(rate * PROBE_SECONDS)
    arrival = np.sort(rng.uniform(0.0, PROBE_SECONDS, count))
    pick = rng.choice(during, count)
    return Trace(f"{trace.name}-peak", float(PROBE_SECONDS), arrival, trace.input_tokens[pick],
                 trace.output_tokens[pick], np.full(PROBE_SECONDS, rate))
