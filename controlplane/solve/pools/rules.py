"""The pool planner's knobs (controlplane/solve/pools/planner.py and reactive.py read them). Seconds; margins
are predicted latency / target; shares are of a pool's replicas."""

from __future__ import annotations

from dataclasses import dataclass

from controlplane.observed.pool import COLD_START_WINDOWS
from controlplane.observed.serving import PoolRole
from controlplane.solve.pools.local_prefill import ThresholdRules


@dataclass(frozen=True)
class PoolRules:
    predictive_interval_seconds: float = 180.0
    cooldown_seconds: float = 300.0
    max_window_age: float = 2.5  # windows: an older latest window is stale
    min_window_requests: int = 20  # fewer requests in a window: its percentiles show no breach
    breach_windows: int = 3
    severe_breach: float = 1.5
    min_fresh_share: float = 0.5  # of a pool's ready replicas that must have reported
    # sizing and scale-down margins (predicted / target), per pool: TTFT is a queue and rises steeply
    # near saturation, ITL grows gently with the batch, so decode may run closer to its target
    plan_margin: float = 0.8
    consolidate_margin: float = 0.75
    decode_plan_margin: float = 0.9
    decode_consolidate_margin: float = 0.85
    # prefill planned at most this busy (offered prompt tokens / capacity): chunked prefill serves a long
    # prompt in several steps, so its TTFT is met only if it finds a replica free at once; past ~0.7 the
    # few such prompts wait behind others (the tail beyond p99 that per-window percentiles do not show)
    max_prefill_utilisation: float = 0.7
    # with `size_prefill_by_mix` and the routers counting prompt lengths, there is no such ceiling: the prefill
    # pool's TTFT is the queue of the length mix over its N replicas (controlplane/learn/prefill_queue.py), and its
    # strictest target holds at `ttft_tail_percentile` too (the requests past the p99 are the longest prompts, which
    # meet the bound only if they barely wait; at the targets' own percentiles attainment fell below static's on 4
    # of 6 runs). On by default: the ceiling's model is one replica's TTFT against its own load, blind to a pool of
    # one or two being a single queue that one long prompt holds up, and over a whole day's night it missed 2-9x
    # static's requests where the mix missed half of them (benchmarks/results/pools-2026-11-30.md, Run 9); the
    # benchmark runs both. Without the routers' length buckets the mean and the ceiling are used
    size_prefill_by_mix: bool = True
    ttft_tail_percentile: float | None = 99.99  # None: the targets' percentiles only
    # of the pool, at least one replica: a bound on the model's error; within it the load x N/M check decides
    max_step_down_share: float = 0.5
    max_reactive_share: float = 0.5  # of the pool, at least one replica
    min_reactive_gain: float = 0.1  # a breach one more replica is predicted to cut by less is not acted on
    startup_seconds: float = 120.0  # a replica asked for now serves this much later (the platform's)
    # a scale-down also carries the highest burst of the last `burst_memory_seconds` (a bucket whose rate is
    # `burst_rise` x the lowest of the `burst_rise_seconds` before it): bursts recur, and a scale-down made less
    # than cooldown + startup before the next cannot be undone in time; a smooth fall (a day's) is no burst
    burst_bucket_seconds: float = 60.0
    burst_rise: float = 1.5
    burst_rise_seconds: float = 180.0
    burst_memory_seconds: float = 600.0
    # a consolidation undone by a scale-up within `undone_within_seconds` is not made again for
    # `undone_memory_seconds` while the load is at least `undone_load_share` of the one the scale-up was sized for
    undone_within_seconds: float = 900.0
    undone_memory_seconds: float = 3600.0
    undone_load_share: float = 0.9
    drain_seconds: float = 180.0  # a backlog is planned to be gone within this after new replicas serve
    # a new decode replica's first steps run this much slower (cold caches and kernels: the windows the latency
    # model leaves out; in benchmarks/pdsim its ITL over its first minute is 1.9-2.05x the warm replicas' in the
    # same windows); a decode scale-up is sized so that its new replicas still keep ITL within bound
    cold_slowdown: float = 2.0
    # a replica's first windows after it became ready are cold (observed.COLD_START_WINDOWS, which the latency
    # model leaves out for the same reason): an ITL breach only they measure ends before a replica asked for now serves
    cold_start_windows: int = COLD_START_WINDOWS
    threshold: ThresholdRules = ThresholdRules()

    def margins(self, role: PoolRole) -> tuple[float, float]:
        """(plan, consolidate) margins of the pool."""
        if role == "decode":
            return self.decode_plan_margin, self.decode_consolidate_margin
        return self.plan_margin, self.consolidate_margin
