"""NVIDIA Dynamo's SLA planner, re-implemented from its published rules, behind our pool planner interface.

Written by us from ai-dynamo/dynamo `components/planner/src/dynamo/planner/utils/planner_core.py` and
`perf_interpolation.py` (the SLA planner of the 0.4-1.x releases; its defaults in
ai-dynamo/dynamo/docs/fern/components/planner/README.md). Every `adjustment_interval` (180 s) it reads, over the
last interval: average TTFT, average ITL, request count, average request duration, average prompt and
output length. Correction factors p = TTFT / profiled TTFT(isl) and d = ITL / profiled ITL(concurrency,
context). It forecasts next interval's request count, isl and osl, then
    prefill: P = ceil(num_req * isl / interval * min(1, p) / thpt_per_gpu(isl) / gpus_per_prefill)
    decode:  D = ceil(num_req * osl / interval / best_thpt_per_gpu(itl_target / d, isl + osl/2) / gpus_per_decode)
each at least `min_endpoint`, then, over the GPU budget, scaled proportionally (prefill rounded, decode
takes the rest). The profile interpolation is Dynamo's (dynamo_interpolation.py).

Defaults are the published ones: adjustment_interval 180 s, min_endpoint 1, correction on, the
throughput (SLA) loop only (load-based scaling is off by default). With `enable_load_scaling` it adds
the load-based loop of its current releases every window (dynamo_load.py: +1 when every engine is over
target, -1 only when consolidation is safe); the SLA loop's answer is its floor. Two deliberate,
documented substitutions: the default predictor is `arima` (pmdarima.auto_arima), which is not a
dependency here, so the `kalman` predictor Dynamo ships (dynamo_kalman.py; its docs recommend it for
bursty traffic) stands in; and the targets it is given are our policy's p90 TTFT and ITL targets,
which it compares with averages, as it does. As in its Kubernetes connector, it does not scale while
the deployment is not ready (a replica starting), and it does not drain: the benchmark removes its
replicas at once (its documented limitation).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from benchmarks.baselines.dynamo_interpolation import Interpolators
from benchmarks.baselines.dynamo_kalman import Kalman
from benchmarks.baselines.dynamo_load import LoadLoop
from benchmarks.pdsim.profile import Profile
from controlplane.observed.serving import ROLES
from controlplane.solve.pools.decision import DecisionKind, PoolDecision
from controlplane.solve.pools.planning import PoolDecisions
from controlplane.solve.pools.view import PoolsView


@dataclass
class DynamoSla:
    profile: Profile
    ttft_target: float  # seconds, compared with the average TTFT
    itl_target: float  # seconds, compared with the average ITL
    prefill_gpus: int
    decode_gpus: int
    adjustment_interval: float = 180.0
    min_endpoint: int = 1
    enable_load_scaling: bool = False
    max_num_batched_tokens: int = 8192  # the prefill engines' chunk, for the load loop's TTFT estimate
    load_scaling_down_sensitivity: float = 0.8
    name: str = "dynamo-sla"
    interpolators: Interpolators = field(init=False)
    predictors: dict = field(init=False)
    load_loop: LoadLoop = field(init=False)
    floor: dict = field(init=False)  # the SLA loop's last answer, the load loop's lower bound
    p_correction: float = 1.0
    d_correction: float = 1.0

    def __post_init__(self) -> None:
        self.interpolators = Interpolators(self.profile)
        self.predictors = {name: Kalman() for name in ("num_req", "isl", "osl")}
        self.load_loop = LoadLoop(self.ttft_target, self.itl_target, self.max_num_batched_tokens,
                                  self.load_scaling_down_sensitivity)
        self.floor = {role: self.min_endpoint for role in ROLES}

    def _observe(self, view: PoolsView) -> dict | None:
        """Averages over the last adjustment interval, from the windows, as its Prometheus queries compute them."""
        recent = [w for w in view.windows if w.end > view.now - self.adjustment_interval]

        def average(get) -> float:
            pairs = [(s.sum, s.count) for s in map(get, recent) if s is not None and s.count]
            count = sum(c for _, c in pairs)
            return sum(t for t, _ in pairs) / count if count else math.nan

        arrivals = [(w.num_arrivals, w.mean_input_tokens) for w in recent if w.num_arrivals]
        num_req = float(sum(n for n, _ in arrivals))
        isl = sum(n * m for n, m in arrivals) / num_req if num_req else math.nan
        finished = [(w.request_seconds.count, w.mean_output_tokens) for w in recent
                    if w.request_seconds is not None and w.request_seconds.count and w.mean_output_tokens]
        done = sum(n for n, _ in finished)
        osl = sum(n * m for n, m in finished) / done if done else math.nan
        metrics = {"ttft": average(lambda w: w.ttft), "itl": average(lambda w: w.itl), "num_req": num_req,
                   "isl": isl, "osl": osl, "request_duration": average(lambda w: w.request_seconds)}
        return None if any(math.isnan(metrics[k]) for k in ("ttft", "itl", "isl", "osl")) else metrics

    def _replicas(self, num_req: float, isl: float, osl: float, budget: int | None) -> tuple[int, int]:
        interval = self.adjustment_interval
        prefill_load = num_req * isl / interval * min(1.0, self.p_correction)
        num_p = math.ceil(prefill_load / self.interpolators.prefill_thpt_per_gpu(isl) / self.prefill_gpus)
        itl = self.itl_target / self.d_correction if self.d_correction > 0 else self.itl_target
        thpt = self.interpolators.best_decode_thpt_per_gpu(itl, isl + osl / 2)
        num_d = math.ceil(num_req * osl / interval / thpt / self.decode_gpus)
        return self._budget(max(num_p, self.min_endpoint), max(num_d, self.min_endpoint), budget)

    def _budget(self, num_p: int, num_d: int, budget: int | None) -> tuple[int, int]:
        """Over the GPU budget: scale both proportionally, prefill rounded, decode takes the rest."""
        total = num_p * self.prefill_gpus + num_d * self.decode_gpus
        if budget is not None and total > budget:
            num_p = max(self.min_endpoint, round(num_p * budget / total))
            num_d = max(self.min_endpoint, round((budget - num_p * self.prefill_gpus) / self.decode_gpus))
        return num_p, num_d

    def _sla(self, view: PoolsView) -> tuple[dict | None, str]:
        """The throughput (SLA) loop, on its interval: (role -> replicas, or None to skip; why)."""
        metrics = self._observe(view)
        if metrics is None:
            return None, "metrics contain None or NaN (no active requests): skipping adjustment"
        num_decode = max(view.pools["decode"].num_ready, 1)
        self.p_correction = metrics["ttft"] / self.interpolators.prefill_ttft(metrics["isl"])
        concurrency = metrics["num_req"] / num_decode * metrics["request_duration"] / self.adjustment_interval
        context = metrics["isl"] + metrics["osl"] / 2
        self.d_correction = metrics["itl"] / self.interpolators.decode_itl(concurrency, context)
        for name in ("num_req", "isl", "osl"):
            self.predictors[name].add(metrics[name])
        num_req, isl, osl = (self.predictors[name].predict() for name in ("num_req", "isl", "osl"))
        num_p, num_d = self._replicas(max(num_req, 0.0), max(isl, 1.0), max(osl, 1.0), view.gpu_budget)
        return {"prefill": num_p, "decode": num_d}, (
            f"predicted {num_req:.0f} req/{self.adjustment_interval:.0f}s isl {isl:.0f} osl {osl:.0f}; "
            f"correction p={self.p_correction:.2f} d={self.d_correction:.2f}")

    def plan(self, view: PoolsView) -> PoolDecisions:
        current = {role: view.pools[role].num_serving for role in ROLES}

        def keep(reason: str) -> PoolDecisions:
            return PoolDecisions(view.now, tuple(PoolDecision(view.now, role, current[role], current[role],
                                                         DecisionKind.keep, reason) for role in ROLES))

        if not view.latest:
            return keep("no metrics yet")
        window = view.latest.seconds
        is_tick = math.floor(view.now / self.adjustment_interval) != \
            math.floor((view.now - window) / self.adjustment_interval)
        targets, reason = None, "between adjustment intervals"
        if is_tick:
            targets, reason = self._sla(view)
            if targets is not None and self.enable_load_scaling:
                self.floor, targets = targets, None
        if self.enable_load_scaling:
            step = self.load_loop.step(view)
            targets = dict(zip(ROLES, self._budget(*(max(current[role] + step[role], self.floor[role])
                                                      for role in ROLES), view.gpu_budget), strict=True))
            reason = f"load loop {step}, throughput floor {self.floor}"
        if targets is None:
            return keep(reason)
        if any(view.pools[role].num_starting for role in ROLES):
            return keep(f"deployment not ready (replicas starting): skip scaling to {targets}")
        return PoolDecisions(view.now, tuple(
            PoolDecision(view.now, role, current[role],
                         min(max(targets[role], view.pools[role].min_replicas), view.pools[role].max_replicas),
                         DecisionKind.predictive if is_tick else DecisionKind.reactive, reason) for role in ROLES))
