"""What any controller that sees only the past can be sure of: the twin-trace bound on the hindsight bound's share.

The hindsight bound (benchmarks/closed_loop_costs.py) knows the whole trace's load; a controller knows the windows
it has seen. Take the trace A and its twin B: A's windows until w0, then A's windows backwards from w0 - 1 (the
task mix swings back the way it came, as plausible a workload as A's own; a trace shorter than B reflects again).
A controller cannot tell the two apart before w0, so the placements in force up to and including window w0 (whose
change it decides on windows before w0) are the same on both; after that it may do anything on each.

The program scores a pair of schedules by the mean of their shares of their own trace's hindsight gain over static
(share = (served - static) / (bound - static), both over the same candidate set C), and finds the best pair that
agrees until w0: a dynamic program over the shared prefix, weighted by the two traces' 1 / (bound - static), on top
of each trace's best continuation from w0 (the recurrence of closed_loop_costs.bound, run backwards). For every
controller whose placements are in C, share_A + share_B <= 2 x mean(w0), so min(share_A, share_B) <= mean(w0):
where mean(w0) is under a target, no such controller reaches the target on both traces. It does not say what a
controller tuned to A's own future could take on A alone.

    python -m benchmarks.causal_bound [--hours 1] [--layers 8] [--workloads 0 1] [--engines vllm sglang]
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass, replace

import numpy as np

from benchmarks.closed_loop import PREFILL, WINDOW_SECONDS, table
from benchmarks.closed_loop_costs import (
    ENGINE_COSTS,
    WORKLOADS,
    best_until,
    candidate_sets,
    make_trace,
    row_schedules,
    window_values,
)

SWEEP_WINDOWS = 12  # w0 every minute of the trace


def reflected(num_windows: int, w0: int) -> np.ndarray:
    """[num_windows] the window of A that each window of the twin B is: itself before w0, then A backwards from
    w0 - 1, forwards again from window 0 if B outlasts that."""
    u = np.arange(num_windows) - w0
    r = np.mod(u, 2 * w0)
    return np.where(u < 0, np.arange(num_windows), np.where(r < w0, w0 - 1 - r, r - w0))


def best_from(value: np.ndarray, stall_ratio: float) -> np.ndarray:
    """[W, C] the most a trace serves from window w to its end with table c in force at w (its stall, if it was
    switched to at w, already paid): value [W, C] tokens, a switch to c in window w costs stall_ratio x value[w, c]."""
    best = np.empty_like(value)
    best[-1] = value[-1]
    for w in range(value.shape[0] - 2, -1, -1):
        best[w] = value[w] + np.maximum(best[w + 1], np.max(best[w + 1] - stall_ratio * value[w + 1]))
    return best


@dataclass(frozen=True)
class Twin:
    w0: int
    gain_a: float  # each trace's hindsight bound over static, as a fraction of static
    gain_b: float
    mean_share: float  # the best mean share of the pair for schedules that agree until w0; nan: B gains nothing


def twin_bound(value: np.ndarray, start: int, stall_ratio: float, w0: int,
               until_a: np.ndarray | None = None, from_a: np.ndarray | None = None) -> Twin:
    """The twin pair split at w0 (1 <= w0 < W), over A's value [W, C] and table `start` at window 0; until_a and
    from_a are best_until / best_from of A when a sweep has them already."""
    until_a = best_until(value, stall_ratio * value, start)[0] if until_a is None else until_a
    from_a = best_from(value, stall_ratio) if from_a is None else from_a
    value_b = value[reflected(value.shape[0], w0)]
    from_b = best_from(value_b, stall_ratio)
    static_a, static_b = value[:, start].sum(), value_b[:, start].sum()
    gain_a, gain_b = from_a[0, start] - static_a, from_b[0, start] - static_b
    if gain_a <= 1e-9 * static_a or gain_b <= 1e-9 * static_b:
        return Twin(w0, gain_a / static_a, gain_b / static_b, float("nan"))
    weight_a, weight_b = 1 / gain_a, 1 / gain_b
    # until w0 the traces' windows are the same, so the shared prefix is A's own, scaled by both weights
    prefix = (weight_a + weight_b) * until_a[w0 - 1]
    switch = stall_ratio * (weight_a * value[w0] + weight_b * value_b[w0])
    at_w0 = np.maximum(prefix, np.max(prefix) - switch)
    total = np.max(at_w0 + weight_a * from_a[w0] + weight_b * from_b[w0])
    mean_share = (total - weight_a * static_a - weight_b * static_b) / 2
    return Twin(w0, gain_a / static_a, gain_b / static_b, float(mean_share))


def sweep(value: np.ndarray, start: int, stall_ratio: float, every: int = SWEEP_WINDOWS) -> list[Twin]:
    """twin_bound at every `every`-th window."""
    until_a, from_a = best_until(value, stall_ratio * value, start)[0], best_from(value, stall_ratio)
    return [twin_bound(value, start, stall_ratio, w0, until_a, from_a) for w0 in range(every, value.shape[0], every)]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.causal_bound")
    p.add_argument("--hours", type=float, default=1.0)
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--engines", nargs="+", choices=list(ENGINE_COSTS), default=list(ENGINE_COSTS))
    p.add_argument("--workloads", nargs="+", type=int, choices=range(len(WORKLOADS)), default=[0, 1])
    args = p.parse_args(argv)
    shape = replace(PREFILL, name=f"prefill EP32, {args.layers} MoE layers", num_layers=args.layers)
    for workload in [WORKLOADS[i] for i in args.workloads]:
        trace = make_trace(shape, workload, args.hours)
        for engine in args.engines:
            cost = ENGINE_COSTS[engine]
            _, _, everything = candidate_sets(trace, row_schedules(trace, engine, progress=print))
            tables = [t for t, _ in everything]
            print(f"  {engine}, {workload.name}: {len(tables)} candidates, valuing them", flush=True)
            value = window_values(trace, tables)
            twins = sweep(value, tables.index(trace.start), cost.stall_seconds / WINDOW_SECONDS)
            rows = [[f"{t.w0 * WINDOW_SECONDS / 60:g} min", f"{100 * t.gain_a:+.2f}%", f"{100 * t.gain_b:+.2f}%",
                     "-" if np.isnan(t.mean_share) else f"{t.mean_share:.0%}"] for t in twins]
            lowest = min((t for t in twins if not np.isnan(t.mean_share)), key=lambda t: t.mean_share, default=None)
            print("\n".join([f"### {engine} ({cost.stall_seconds:g} s a change), {workload.name}", "",
                             *table(["B leaves A at", "A's bound over static", "B's bound over static",
                                     "best mean share of a controller that cannot tell them apart"], rows), "",
                             "lowest: -" if lowest is None else
                             f"lowest: {lowest.mean_share:.1%} with B leaving A at {lowest.w0} windows", ""]),
                  flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
