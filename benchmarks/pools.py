"""Prefill/decode pool planners on replayed traces: ours vs a Dynamo-style planner vs static peak provisioning.

Each trace (bursty, diurnal, step; generated, seeded) is replayed in the PD simulator (benchmarks/pdsim/) once
per planner, in the same run, with the same SLO targets, GPU budget, replica bounds and starting sizes (the
static peak sizes). Reported per run: SLO attainment (share of all requests that finished within the p99 TTFT
and ITL bounds, and the number that did not), achieved TTFT and ITL (per request, mean time between its output
tokens) p90/p99, GPU-hours, flaps (a pool reversing direction within the cooldown of its previous change),
pool-size decisions applied, local-prefill threshold changes, requests failed by removal without drain. On the
step trace a bound runs too (baselines/oracle.py: what any planner that ran low-rate sizes before the step
could reach). Prints a markdown table and writes it to benchmarks/results/pools-<date>.md.

    OMP_NUM_THREADS=1 python -m benchmarks.pools [--minutes 60] [--seed 0] [--traces bursty diurnal step] [--no-write]
"""

from __future__ import annotations

import argparse
import datetime
import pathlib
import platform
import time
from dataclasses import dataclass, replace

from benchmarks.baselines.dynamo import DynamoSla
from benchmarks.baselines.oracle import StepOracle
from benchmarks.baselines.static import StaticPools
from benchmarks.pdsim.cost import EngineCost
from benchmarks.pdsim.outcome import Outcome, outcome
from benchmarks.pdsim.profile import profile
from benchmarks.pdsim.simulator import SimConfig, simulate
from benchmarks.pdsim.trace import Trace, bursty, diurnal, step
from controlplane.plan.pools import MoectlPoolPlanner
from controlplane.solve.pools.rules import PoolRules
from controlplane.solve.pools.view import SloTarget

TARGETS = (SloTarget("ttft", 90, 1.0), SloTarget("ttft", 99, 2.0), SloTarget("itl", 90, 0.050),
           SloTarget("itl", 99, 0.080))
COOLDOWN_SECONDS = 300.0  # flaps are reversals within this; our planner's cooldown is the same
GPU_BUDGET = 48
MAX_REPLICAS = 16


TRACE_NAMES = ("bursty", "diurnal", "step")


def traces(minutes: float, scale: float = 1.0, seed: int = 0, names: tuple[str, ...] = TRACE_NAMES) -> list[Trace]:
    """The traffic shapes `names`, `minutes` long (diurnal: one day's cycle over them), rates x `scale`."""
    seconds = int(minutes * 60)
    make = {"bursty": lambda: bursty(seconds, 10.0 * scale, seed=seed),
            "diurnal": lambda: diurnal(seconds, 4.0 * scale, 24.0 * scale, seed=seed + 1),
            "step": lambda: step(seconds, 8.0 * scale, 24.0 * scale, seed=seed + 2)}
    return [make[name]() for name in names]


@dataclass(frozen=True)
class Run:
    outcome: Outcome
    static_gpu_hours: float
    wall_seconds: float


def run_trace(trace: Trace, cost: EngineCost = EngineCost()) -> list[Run]:
    config = SimConfig(targets=TARGETS, initial={}, bounds={"prefill": (1, MAX_REPLICAS), "decode": (1, MAX_REPLICAS)},
                       gpu_budget=GPU_BUDGET, cost=cost)
    static = StaticPools.for_peak(trace, config, max_replicas=MAX_REPLICAS)
    config = replace(config, initial=dict(static.sizes))
    dynamo_args = dict(profile=profile(cost), ttft_target=TARGETS[0].seconds, itl_target=TARGETS[2].seconds,
                       prefill_gpus=cost.prefill_gpus, decode_gpus=cost.decode_gpus,
                       max_num_batched_tokens=cost.prefill_max_batch_tokens)
    planners = [
        (static, config),
        (DynamoSla(**dynamo_args), replace(config, drain=False)),
        (DynamoSla(**dynamo_args, enable_load_scaling=True, name="dynamo-sla+load"), replace(config, drain=False)),
        (MoectlPoolPlanner(), config),
        (MoectlPoolPlanner(name="moectl+ceiling", rules=PoolRules(size_prefill_by_mix=False)), config),
    ]
    if trace.name == "step":  # the bound on what reacting to an unforecast step can reach (baselines/oracle.py)
        oracle = StepOracle.for_step(trace, config, MAX_REPLICAS)
        planners.append((oracle, replace(config, initial=dict(oracle.low))))
    runs, static_hours = [], None
    for planner, planner_config in planners:
        start = time.perf_counter()
        result = simulate(trace, planner, planner_config)
        measured = outcome(result, COOLDOWN_SECONDS)
        static_hours = static_hours or measured.gpu_hours
        runs.append(Run(measured, static_hours, time.perf_counter() - start))
    return runs


def table(runs: list[Run]) -> str:
    header = ["trace", "planner", "attainment", "missed", "TTFT p90 s", "TTFT p99 s", "ITL p90 ms", "ITL p99 ms",
              "GPU-h", "vs static", "flaps", "decisions", "threshold moves", "failed", "sim s"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for run in runs:
        o = run.outcome
        lines.append("| " + " | ".join([
            o.trace, o.planner, f"{100 * o.attainment:.2f}%", str(o.num_missed), f"{o.ttft_p90:.2f}",
            f"{o.ttft_p99:.2f}", f"{1e3 * o.itl_p90:.1f}", f"{1e3 * o.itl_p99:.1f}", f"{o.gpu_hours:.1f}",
            f"{100 * o.gpu_hours / run.static_gpu_hours:.0f}%", str(o.num_flaps), str(o.num_decisions),
            str(o.num_threshold_changes), str(o.num_aborted + o.num_unserved), f"{run.wall_seconds:.0f}"]) + " |")
    return "\n".join(lines)


MOECTL_PLANNERS = ("moectl", "moectl+ceiling")


def verdict(runs: list[Run]) -> str:
    """The targets, per trace and moectl variant: attainment >= static and >= Dynamo-style (requests missed
    in brackets, the comparison being of the unrounded shares), <= 85% of static GPU-hours, 0 flaps."""
    lines = []
    for trace in dict.fromkeys(r.outcome.trace for r in runs):
        by = {r.outcome.planner: r.outcome for r in runs if r.outcome.trace == trace}
        static, dynamo = by["static-peak"], by["dynamo-sla"]
        for name in (p for p in MOECTL_PLANNERS if p in by):
            ours = by[name]
            checks = {
                f"attainment >= static ({ours.num_missed} vs {static.num_missed} missed)":
                    ours.attainment >= static.attainment,
                f"attainment >= dynamo-style ({ours.num_missed} vs {dynamo.num_missed})":
                    ours.attainment >= dynamo.attainment,
                "GPU-h <= 85% static": ours.gpu_hours <= 0.85 * static.gpu_hours,
                "zero flaps": ours.num_flaps == 0,
            }
            lines.append(f"- {trace}, {name}: " + ", ".join(f"{check} {'met' if ok else 'NOT met'}"
                                                           for check, ok in checks.items()))
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=60.0, help="trace length")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--traces", nargs="+", default=list(TRACE_NAMES), choices=TRACE_NAMES,
                        help="which shapes (with --minutes 1440: a diurnal trace of a whole day)")
    parser.add_argument("--no-write", action="store_true", help="print only")
    args = parser.parse_args()
    runs = [run for trace in traces(args.minutes, seed=args.seed, names=tuple(args.traces)) for run in run_trace(trace)]
    cost = EngineCost()
    note = (f"{args.minutes:g}-minute traces, seed {args.seed}, 10 s windows; targets "
            + ", ".join(f"{t.name} <= {t.seconds:g}s" for t in TARGETS)
            + f"; GPU budget {GPU_BUDGET}, pools 1..{MAX_REPLICAS} replicas ({cost.prefill_gpus} GPU per prefill, "
            f"{cost.decode_gpus} per decode replica); a new replica is ready after {cost.startup_seconds:g}s and runs "
            f"{cost.warmup_factor:g}x slower for {cost.warmup_seconds:g}s; flaps counted within {COOLDOWN_SECONDS:g}s. "
            "Every planner starts at the static peak sizes. static-peak: the fewest replicas per pool meeting every "
            "target under the trace's busiest 5 minutes replayed steadily. dynamo-sla: benchmarks/baselines/dynamo.py "
            "with its published defaults; dynamo-sla+load: the same with its load-based loop on (the two-loop planner "
            "of its current releases); both remove replicas without drain, as Dynamo does. oracle-step (bound): "
            "benchmarks/baselines/oracle.py, the low rate's static sizes until the first window that measured the "
            "step, then the whole GPU budget: no reactive planner that ran low-rate sizes can beat its attainment. "
            "moectl: controlplane/plan/pools.py (prefill sized from the queue of the routers' prompt-length mix); "
            "moectl+ceiling: the same with PoolRules.size_prefill_by_mix off (prefill from the mean prompt under a "
            "0.7 utilisation ceiling, the default before 2026-12-01). "
            f"Simulated on a shared 2-core {platform.processor() or platform.machine()}.")
    text = table(runs)
    print(text)
    print(verdict(runs))
    if not args.no_write:
        today = datetime.date.today().isoformat()
        path = pathlib.Path(__file__).parent / "results" / f"pools-{today}.md"
        path.write_text(f"# Pool planners on replayed traces ({today})\n\n{note}\n\n{text}\n\nTargets of issue 14 "
                        f"(moectl vs the others, per trace):\n\n{verdict(runs)}\n")
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
