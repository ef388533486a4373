"""What a replay achieved: SLO attainment, latency percentiles, GPU-hours, flaps, decisions.

TTFT percentiles are over requests; ITL percentiles over output tokens (every gap between two
tokens of a sequence), as the engines' ITL histograms count them and the targets are set. A request
meets the SLO when it finished with TTFT and its mean ITL within the policy's strictest bounds, the
p99 targets where given: the bound the SLO promises almost every request. Requests that failed
(removed without drain) or never finished count as misses.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from benchmarks.pdsim.replicas import REMOVED
from benchmarks.pdsim.requests import ABORTED, DONE
from benchmarks.pdsim.simulator import SimResult
from controlplane.solve.pools.decision import PoolDecision
from controlplane.solve.pools.view import SloTarget


def bounds(targets: tuple[SloTarget, ...]) -> tuple[float, float]:
    """(TTFT, ITL) seconds a request must stay within: each metric's highest-percentile target."""
    def bound(metric: str) -> float:
        mine = sorted((t for t in targets if t.metric == metric), key=lambda t: t.percentile)
        return mine[-1].seconds if mine else float("inf")
    return bound("ttft"), bound("itl")


def weighted_percentile(values: np.ndarray, weights: np.ndarray, q: float) -> float:
    """The q-th percentile of `values`, each counted `weights` times (0 when there are none)."""
    if values.size == 0:
        return 0.0
    order = np.argsort(values)
    cumulative = np.cumsum(weights[order]) / weights.sum()
    return float(values[order][min(np.searchsorted(cumulative, q / 100), values.size - 1)])


def flaps(decisions: list[PoolDecision], cooldown_seconds: float) -> int:
    """Reversals of direction on one pool within `cooldown_seconds` of its previous change."""
    count, last = 0, {}
    for d in decisions:
        if d.direction == 0:
            continue
        previous = last.get(d.role)
        if previous and previous.direction == -d.direction and d.at - previous.at < cooldown_seconds:
            count += 1
        last[d.role] = d
    return count


@dataclass(frozen=True)
class Outcome:
    planner: str
    trace: str
    num_requests: int
    num_missed: int  # requests that did not meet the SLO (a share rounded to 100.00 % can hide dozens of a million)
    ttft_p90: float
    ttft_p99: float
    itl_p90: float
    itl_p99: float
    gpu_hours: float
    num_flaps: int
    num_decisions: int  # applied pool-size changes
    num_threshold_changes: int
    num_aborted: int
    num_unserved: int

    @property
    def attainment(self) -> float:
        """Share of all requests that met the SLO (1 without requests)."""
        return 1.0 - self.num_missed / self.num_requests if self.num_requests else 1.0


def gpu_hours(result: SimResult) -> float:
    end = result.trace.seconds
    seconds = 0.0
    for r in result.replicas:
        until = min(r.removed_at if r.state == REMOVED and r.removed_at is not None else end, end)
        seconds += max(0.0, until - max(r.created_at, 0.0)) * result.config.cost.gpus(r.role)
    return seconds / 3600.0


def outcome(result: SimResult, cooldown_seconds: float) -> Outcome:
    req = result.requests
    ttft_bound, itl_bound = bounds(result.config.targets)
    done = req.status == DONE
    ttft, itl = req.ttft, req.itl
    met = done & (ttft <= ttft_bound) & ~(itl > itl_bound)  # NaN ITL (one-token outputs) meets
    gaps, tokens = result.token_gaps[:, 1], result.token_gaps[:, 2]

    def pct(values: np.ndarray, q: float) -> float:
        return float(np.percentile(values, q)) if values.size else float("nan")

    return Outcome(result.planner, result.trace.name, int(req.arrival.size), int((~met).sum()),
                   pct(ttft[done], 90), pct(ttft[done], 99), weighted_percentile(gaps, tokens, 90),
                   weighted_percentile(gaps, tokens, 99),
                   gpu_hours(result), flaps(result.decisions, cooldown_seconds), len(result.decisions),
                   len(result.thresholds), int((req.status == ABORTED).sum()),
                   int((~done & (req.status != ABORTED)).sum()))


def meets_targets(result: SimResult, targets: tuple[SloTarget, ...], skip_seconds: float = 0.0) -> bool:
    """Every target's percentile within its bound (TTFT over the requests that arrived after
    `skip_seconds`, ITL over the tokens of the windows after it), and every such request finished."""
    req = result.requests
    late = req.arrival >= skip_seconds
    if not (req.status[late] == DONE).all():
        return False
    gaps = result.token_gaps[result.token_gaps[:, 0] > skip_seconds]
    for target in targets:
        if target.metric == "ttft":
            measured = float(np.percentile(req.ttft[late], target.percentile)) if late.any() else 0.0
        else:
            measured = weighted_percentile(gaps[:, 1], gaps[:, 2], target.percentile)
        if measured > target.seconds:
            return False
    return True
