"""Do changes pay once they cost something? The closed loop (benchmarks/closed_loop.py: its shapes, load model,
step-time model, strategies and planner) with a price on every placement change, and the best schedule of changes
in hindsight as the bound.

Served capacity. A window is WINDOW_SECONDS of the group's wall time; under placement p it serves at the rate the
step-time model gives for that window's load (agents/sim/cost.py: tokens / modelled seconds). A change costs the
engine's stall: `stall_seconds` of the group's whole capacity at the rate of the placement it switches to
(controlplane/plan/change_price.py ENGINE_PRIORS: vLLM's synchronous rearrange, 0.91 s; an SGLang group's
restart, 180 s). A strategy's served tokens: the sum over windows of WINDOW_SECONDS x rate(window, placement in
force), less each change's stall x rate. Every row and the bound are counted by this one function (`served`).

Rows: static; EPLB every N (N the engine's own rail: vLLM's rearrange interval, SGLang's restart spacing); moectl
as it is (the planner under the engine's rails, min_gain 0.05); moectl pricing its changes (the same planner with
no threshold and no min_gain, each plan made only when controlplane/plan/change_price.py says it pays, from the
pool's measured step time against its imbalance and the hot set's persistence on the window history,
controlplane/learn/persistence.py); the bound.

The bound: a dynamic program over (window, placement in force) on a candidate set C. Served capacity is a sum over
windows of a term that depends only on (window, placement in force), less a change cost that depends only on (window,
placement switched to), so the best schedule over C obeys V[w][p] = value(w, p) + max(V[w-1][p],
max_q V[w-1][q] - cost(w, p)), exact over every schedule whose placements are in C (Bellman). C: the starting
placement; a fresh solve (controlplane/solve/placement/solver.py) of the load summed over each span of
`BOUND_SPANS` windows starting at every multiple of the shortest (it knows the whole trace's load: a placement to
hold from w is fitted to the load it will meet), and of each span ending there; and every placement any row ran. So
the bound is at least every row by construction, and any row above it is a bug in the accounting.
Beside it, two diagnostics, the same program with its timing still in hindsight: over placements knowable at the
time (the solves of spans that ended before the switch, of the controller's own forecasts there, forecast_ahead
on its history over 30 s to 15 minutes, and the rows' own); and over those and the solves of a straight line
through each expert's last 8 minutes of tokens, taken 8 to 30 minutes ahead (a forecast the controller does not
make). Where the bound is far above the first, what the rows miss is foresight of the load, not the timing or the
price of their changes; where the second is far above the first, a longer forecast from the past load would
find placements that close it.

    python -m benchmarks.closed_loop_costs [--hours 0.5] [--layers 16] [--no-write]
"""

from __future__ import annotations

import argparse
import datetime
import os
import pathlib
import platform
import sys
import time
from dataclasses import dataclass, field, replace

import numpy as np

from agents.protocol.placement import PlacementTable, gpu_load, imbalance
from agents.sim.cost import GPU_NODES, step_times
from agents.sim.load import LoadModel
from agents.sim.workloads import Workload
from benchmarks.baselines.eplb import Eplb
from benchmarks.closed_loop import (
    HOUR,
    PREFILL,
    STEPS_PER_WINDOW,
    WINDOW_SECONDS,
    Moectl,
    PeriodicEplb,
    Shape,
    Static,
    starting_point,
    table,
)
from controlplane.desired import Policy
from controlplane.learn.forecast import forecast_ahead
from controlplane.observed.window import RANK_REPORTS, Window
from controlplane.plan.change_price import (
    ENGINE_PRIORS,
    ChangeCost,
    Price,
    price_placement,
)
from controlplane.plan.engines import RAILS, engine_policy
from controlplane.plan.placement import MAX_FORECAST_WINDOWS
from controlplane.solve.placement.solver import solve_placement

RECORDED_WINDOWS = 24  # the 2 minutes before the trace whose load the starting table is solved for
SOLVE_EVERY = 6  # windows between the long-fit row's solves
MAX_PRICE_HISTORY = 240  # windows (20 min) the pricing strategy measures the hot set's persistence on
BOUND_SPANS = (6, 24, 96)  # windows: the hindsight placements are fitted to 30 s, 2 min and 8 min of load
# the knowable set's own forecasts: the controller's (controlplane/learn/forecast.py forecast_ahead on its
# MAX_FORECAST_WINDOWS of history, as controlplane/plan/placement.py aims it) over these horizons, 30 s to 15
# minutes (vLLM's in-force 2 minutes, SGLang's 15: the engines' rails); and, beyond what the controller has, a
# straight line through LINE_WINDOWS of each expert's tokens taken to the middle of these horizons
FORECAST_HORIZONS = (6, 24, 96, 180)
LINE_HORIZONS = (96, 180, 360)
LINE_WINDOWS = 96
# what a change costs the simulated group, per engine (the priors: the benchmark has no engine to measure)
ENGINE_COSTS = {engine: ENGINE_PRIORS[engine] for engine in ("vllm", "sglang")}
# EPLB every N: vLLM's own rearrange interval; SGLang's restart spacing (controlplane/plan/engines.py)
EPLB_SECONDS = {"vllm": 120.0, "sglang": RAILS["sglang"].min_change_seconds}

# Two workloads. Changes pay: DeepSeek-like per-layer Zipf skew a little hotter than the calibrated serving mix
# (exponents 0.6-0.9; calibrated 0.2-0.5, stress 0.9-1.3: agents/sim/workloads.py) whose task mix swings over an
# hour with a slow walk, so a placement fitted to the load now holds for many minutes. Changes do not pay: the
# calibrated skew whose hot set swings between two kinds of text every 90 s, no walk: the start's placement is
# fitted to the 2 minutes recorded before (the mix's average), and a placement fitted to either kind is wrong
# 45 s later, faster than a change pays back.
PAYS = Workload("changes pay: hotter skew, task mix swings over 1 h", drift_sigma=0.01, swing_period_seconds=HOUR,
                min_exponent=0.6, max_exponent=0.9)
DOES_NOT_PAY = Workload("changes do not pay: calibrated skew, hot set swings every 20 s", drift_sigma=0.0,
                        swing_period_seconds=20.0, min_exponent=0.2, max_exponent=0.5)
WORKLOADS = (PAYS, DOES_NOT_PAY)


@dataclass
class Trace:
    """The workload's windows, the same for every row: expert_tokens [W, L, E] and the group's starting table."""

    shape: Shape
    workload: Workload
    expert_tokens: np.ndarray
    start: PlacementTable
    traffic: object
    # (window, id(table)) -> (table, tokens per modelled second): the table is held so its id is not reused
    _rates: dict = field(default_factory=dict)

    @property
    def num_windows(self) -> int:
        return self.expert_tokens.shape[0]

    def step_seconds(self, w: int, placement: PlacementTable) -> tuple[float, float]:
        """(max/mean GPU load, modelled seconds of one step) of window w under `placement`."""
        s = self.shape
        rows = gpu_load(placement.slot_load(self.expert_tokens[w]), s.topology.num_gpus)
        times = step_times(rows, s.tokens_per_window / s.topology.num_gpus, self.traffic, GPU_NODES,
                           STEPS_PER_WINDOW)
        return imbalance(rows), times.forward_seconds / STEPS_PER_WINDOW

    def rate(self, w: int, placement: PlacementTable) -> float:
        """Tokens the group serves per second of window w under `placement` (relative: the model's seconds)."""
        key = (w, id(placement))
        if key not in self._rates:
            rate = self.shape.tokens_per_window / STEPS_PER_WINDOW / self.step_seconds(w, placement)[1]
            self._rates[key] = (placement, rate)
        return self._rates[key][1]


def make_trace(shape: Shape, workload: Workload, hours: float, seed: int = 0) -> Trace:
    """`hours` of windows after RECORDED_WINDOWS more, whose summed load EPLB solves for the starting table (as a
    deployment starts from an expert distribution recorded before it: SGLang's --init-expert-location). The
    all-to-all's traffic per row is closed_loop's, sampled under its starting table."""
    _, traffic = starting_point(shape, workload, seed)
    load = LoadModel(shape.num_layers, shape.num_experts, shape.top_k, seed=seed, **workload.load_kwargs())
    rng = np.random.default_rng([seed, 1])
    windows = []
    for index in range(RECORDED_WINDOWS + int(hours * HOUR / WINDOW_SECONDS)):
        windows.append(load.route(load.popularity(index * WINDOW_SECONDS), shape.tokens_per_window, rng))
        load.drift()
    plan = Eplb().solve(np.sum(windows[:RECORDED_WINDOWS], axis=0), shape.topology)
    return Trace(shape, workload, np.stack(windows[RECORDED_WINDOWS:]),
                 PlacementTable(plan.slot_to_expert, plan.slot_share), traffic)


@dataclass
class Schedule:
    """A row: the placement in force in each window, and the windows a change landed in."""

    name: str
    tables: list[PlacementTable]
    changes: list[int]
    prices: list[Price] = field(default_factory=list)  # the pricing row's verdicts, paid or not


def served(trace: Trace, schedule: Schedule, cost: ChangeCost) -> float:
    """Tokens served over the trace: every window's WINDOW_SECONDS at its placement's rate, less each change's
    stall at the rate of the placement it switched to."""
    tokens = sum(WINDOW_SECONDS * trace.rate(w, p) for w, p in enumerate(schedule.tables))
    return tokens - sum(cost.stall_seconds * trace.rate(w, schedule.tables[w]) for w in schedule.changes)


class PricedMoectl(Moectl):
    """The planner with no trigger threshold and no min_gain, each plan made only when it pays
    (controlplane/plan/change_price.py). It reads what a pool's windows carry: expert load, slot load, the
    ranks' forward seconds (the step time) and the window history."""

    def __init__(self, shape: Shape, policy: Policy, cost: ChangeCost, name: str = "moectl pricing its changes"):
        super().__init__(shape, policy.model_copy(update=dict(imbalance_threshold=1.0, min_gain=0.0)), name)
        self.cost = cost
        self.history: list[np.ndarray] = []
        self.measured: list[tuple[float, float]] = []  # (max/mean, step seconds) per window
        self.prices: list[Price] = []

    def decide(self, now: float, window: Window, table: PlacementTable) -> PlacementTable | None:
        num_gpus = self.shape.topology.num_gpus
        self.history = [*self.history, window.expert_tokens][-MAX_PRICE_HISTORY:]
        self.measured = [*self.measured, (window.imbalance(num_gpus),
                                          window.counters["forward_seconds"] / STEPS_PER_WINDOW)][-MAX_PRICE_HISTORY:]
        saved = (self.version, self.last_change_at, list(self.changes))
        chosen = super().decide(now, window, table)
        if chosen is None:
            return None
        price = price_placement(table, chosen, np.stack(self.history), *zip(*self.measured, strict=True), self.cost,
                                WINDOW_SECONDS, num_gpus)
        self.prices.append(price)
        if price.is_paying:
            return chosen
        self.version, self.last_change_at, self.changes = saved  # not made: the pool keeps its table
        return None


class PricedLongFit:
    """Not the planner: every `SOLVE_EVERY` windows past the engine's rail, a fresh solve of the load summed over
    the whole priced history (the last MAX_PRICE_HISTORY windows), made when the same pricing says it pays. It says
    how much of the bound a placement fitted to many minutes of load takes where the planner's, fitted to its
    forecast of the next windows, does not (a restart's placement must last)."""

    def __init__(self, shape: Shape, engine: str, cost: ChangeCost, name: str = "pricing, placement fitted to 20 min"):
        self.shape, self.cost, self.name = shape, cost, name
        self.min_change_seconds = RAILS[engine].min_change_seconds
        self.history: list[np.ndarray] = []
        self.measured: list[tuple[float, float]] = []
        self.prices: list[Price] = []
        self.last_change_at = -np.inf

    def decide(self, now: float, window: Window, table: PlacementTable) -> PlacementTable | None:
        num_gpus = self.shape.topology.num_gpus
        self.history = [*self.history, window.expert_tokens][-MAX_PRICE_HISTORY:]
        self.measured = [*self.measured, (window.imbalance(num_gpus),
                                          window.counters["forward_seconds"] / STEPS_PER_WINDOW)][-MAX_PRICE_HISTORY:]
        if window.index % SOLVE_EVERY or now - self.last_change_at < self.min_change_seconds:
            return None
        plan = solve_placement(np.sum(self.history, axis=0), self.shape.topology)
        chosen = PlacementTable(plan.slot_to_expert, plan.slot_share)
        price = price_placement(table, chosen, np.stack(self.history), *zip(*self.measured, strict=True), self.cost,
                                WINDOW_SECONDS, num_gpus)
        self.prices.append(price)
        if not price.is_paying:
            return None
        self.last_change_at = now
        return chosen


def run_schedule(trace: Trace, strategy) -> Schedule:  # noqa: ANN001
    """The strategy on the trace: it sees each window as the store would hold it and may switch the group's table
    from the next window on."""
    s = trace.shape
    num_gpus = s.topology.num_gpus
    complete = {f"{RANK_REPORTS}{rank}": 1 for rank in range(num_gpus)}
    current, tables, changes = trace.start, [], []
    for w in range(trace.num_windows):
        tables.append(current)
        slots = current.slot_load(trace.expert_tokens[w])
        seconds = trace.step_seconds(w, current)[1] * STEPS_PER_WINDOW
        window = Window(index=w, start=w * WINDOW_SECONDS, seconds=WINDOW_SECONDS, placement_version=0,
                        num_reports=num_gpus, num_slot_reports=num_gpus, expert_tokens=trace.expert_tokens[w],
                        slot_tokens=slots, counters=complete | {"forward_seconds": seconds})
        chosen = strategy.decide((w + 1) * WINDOW_SECONDS, window, current)
        if chosen is not None and w + 1 < trace.num_windows:
            current = chosen
            changes.append(w + 1)
    return Schedule(strategy.name, tables, changes, list(getattr(strategy, "prices", [])))


def line_ahead(history: np.ndarray, horizon: int) -> np.ndarray:
    """The least-squares line through each expert's tokens in history [W, L, E], at the middle of the next
    `horizon` windows, >= 0: [L, E] (a diagnostic forecast; the controller's is forecast_ahead)."""
    t = np.arange(history.shape[0], dtype=np.float64) - (history.shape[0] - 1) / 2
    mean = history.mean(axis=0)
    slope = np.tensordot(t, history - mean, axes=1) / max(float((t**2).sum()), 1.0)
    return np.maximum(mean + slope * ((history.shape[0] - 1) / 2 + (horizon + 1) / 2), 0.0)


def forecast_candidates(trace: Trace, forecast, horizons: tuple[int, ...], num_history: int  # noqa: ANN001
                        ) -> list[tuple[PlacementTable, int]]:
    """Placements solved at every multiple of BOUND_SPANS[0] windows, available from there, for what `forecast`
    (history [W, L, E], horizon -> [L, E]) makes of the last `num_history` windows over each of `horizons`."""
    topology, found = trace.shape.topology, []
    for w in range(BOUND_SPANS[0], trace.num_windows, BOUND_SPANS[0]):
        history = trace.expert_tokens[max(w - num_history, 0):w].astype(np.float64)
        for horizon in horizons:
            plan = solve_placement(forecast(history, horizon), topology)
            found.append((PlacementTable(plan.slot_to_expert, plan.slot_share), w))
    return found


def candidates(trace: Trace, schedules: list[Schedule], *, is_causal: bool = False
               ) -> list[tuple[PlacementTable, int]]:
    """C, each with the first window it may be switched to: the start (window 0); a fresh solve of the load summed
    over each span of BOUND_SPANS windows from every multiple of the shortest (window 0: it knows the trace), or
    with `is_causal` over the span that ends there and of the controller's forecasts there (forecast_ahead over
    FORECAST_HORIZONS; available from there: what was knowable at the time); and every table a row ran (from the
    window it first ran in)."""
    topology = trace.shape.topology
    found = {id(trace.start): (trace.start, 0)}
    for span in BOUND_SPANS:
        for w in range(0, trace.num_windows, BOUND_SPANS[0]):
            load = trace.expert_tokens[max(w - span, 0):w] if is_causal else trace.expert_tokens[w:w + span]
            if load.shape[0] == 0:
                continue
            plan = solve_placement(load.sum(axis=0), topology)
            solved = PlacementTable(plan.slot_to_expert, plan.slot_share)
            found[id(solved)] = (solved, w if is_causal else 0)
    if is_causal:
        found |= {id(p): (p, w) for p, w in forecast_candidates(trace, forecast_ahead, FORECAST_HORIZONS,
                                                                MAX_FORECAST_WINDOWS)}
    for schedule in schedules:
        for w, p in enumerate(schedule.tables):
            found.setdefault(id(p), (p, w))
    return list(found.values())


def window_values(trace: Trace, tables: list[PlacementTable]) -> np.ndarray:
    """[W, C] tokens each window serves under each table (WINDOW_SECONDS at its rate); a change's stall in window
    w costs stall_seconds / WINDOW_SECONDS of the value of the table it switches to."""
    return np.array([[WINDOW_SECONDS * trace.rate(w, p) for p in tables] for w in range(trace.num_windows)])


def best_until(value: np.ndarray, switch: np.ndarray, start: int) -> tuple[np.ndarray, np.ndarray]:
    """The forward recurrence of `bound`: ([W, C] the most served from window 0 to w with table c in force at w,
    starting from table `start`; [W, C] the table in force at w - 1 on that best path). value: [W, C] tokens each
    window serves under each table; switch: [W, C] what switching to it in window w costs (inf: not yet known)."""
    num_windows, num_tables = value.shape
    best = np.full((num_windows, num_tables), -np.inf)
    best[0, start] = value[0, start]  # every row starts from the start's table
    came_from = np.zeros((num_windows, num_tables), dtype=np.int64)
    for w in range(1, num_windows):
        leader = int(np.argmax(best[w - 1]))
        switched = best[w - 1, leader] - switch[w]
        is_switch = switched > best[w - 1]
        came_from[w] = np.where(is_switch, leader, np.arange(num_tables))
        best[w] = np.where(is_switch, switched, best[w - 1]) + value[w]
    return best, came_from


def bound(trace: Trace, candidates: list[tuple[PlacementTable, int]], cost: ChangeCost,
          name: str = "bound: best schedule in hindsight") -> Schedule:
    """The best schedule over `candidates` (each from the first window it may be switched to; the module's
    docstring says why the program is exact)."""
    tables = [p for p, _ in candidates]
    available = np.array([w for _, w in candidates])
    num_windows = trace.num_windows
    value = window_values(trace, tables)
    switch = np.where(np.arange(num_windows)[:, None] >= available[None, :],
                      value * (cost.stall_seconds / WINDOW_SECONDS), np.inf)
    start = next(i for i, p in enumerate(tables) if p is trace.start)
    best, came_from = best_until(value, switch, start)
    p = int(np.argmax(best[-1]))
    path = [p]
    for w in range(num_windows - 1, 0, -1):
        p = int(came_from[w, p])
        path.append(p)
    path.reverse()
    changes = [w for w in range(1, num_windows) if path[w] != path[w - 1]]
    return Schedule(name, [tables[i] for i in path], changes)


@dataclass(frozen=True)
class Row:
    name: str
    served: float
    num_changes: int
    mean_imbalance: float
    num_priced: int = 0  # plans the pricing row priced (paid ones are its changes)


def row_schedules(trace: Trace, engine: str, progress=print) -> list[Schedule]:  # noqa: ANN001
    """The rows' schedules on one trace under one engine's change cost (static first)."""
    cost = ENGINE_COSTS[engine]
    defaults = engine_policy(Policy(mode="auto"), engine)
    strategies = [Static(), PeriodicEplb(trace.shape, EPLB_SECONDS[engine]),
                  Moectl(trace.shape, defaults, "moectl as it is (min_gain 0.05)"),
                  PricedMoectl(trace.shape, defaults, cost), PricedLongFit(trace.shape, engine, cost)]
    schedules = []
    for strategy in strategies:
        started = time.perf_counter()
        schedules.append(run_schedule(trace, strategy))
        progress(f"  {engine}, {trace.workload.name}: {strategy.name} in {time.perf_counter() - started:.0f}s",
                 flush=True)
    return schedules


def candidate_sets(trace: Trace, schedules: list[Schedule]) -> tuple[list, list, list]:
    """(knowable, knowable and 8-min lines, the bound's) candidate sets: the bound's holds the others too (from
    window 0: it knows the trace), so it is at least each of their rows."""
    knowable = candidates(trace, schedules, is_causal=True)
    lines = knowable + forecast_candidates(trace, line_ahead, LINE_HORIZONS, LINE_WINDOWS)
    return knowable, lines, candidates(trace, schedules) + [(p, 0) for p, _ in lines]


def run_case(trace: Trace, engine: str, progress=print) -> list[Row]:  # noqa: ANN001
    """Every row and the bound on one trace under one engine's change cost; the bound last."""
    cost = ENGINE_COSTS[engine]
    schedules = row_schedules(trace, engine, progress)
    started = time.perf_counter()
    knowable, lines, everything = candidate_sets(trace, schedules)
    causal = bound(trace, knowable, cost, "bound over placements knowable at the time")
    with_lines = bound(trace, lines, cost, "bound over knowable placements and 8-min lines ahead")
    schedules.append(bound(trace, everything, cost))
    schedules[-1:-1] = [causal, with_lines]
    progress(f"  {engine}, {trace.workload.name}: bound in {time.perf_counter() - started:.0f}s", flush=True)
    return [Row(s.name, served(trace, s, cost), len(s.changes),
                float(np.mean([trace.step_seconds(w, p)[0] for w, p in enumerate(s.tables)])), len(s.prices))
            for s in schedules]


def gain_captured(rows: list[Row], name: str) -> float | None:
    """(row - static) / (bound - static); None where the bound gains nothing over static."""
    static, best = rows[0].served, rows[-1].served
    row = next(r for r in rows if r.name == name)
    return None if best - static <= 1e-9 * static else (row.served - static) / (best - static)


def report(rows: list[Row]) -> list[str]:
    static, best = rows[0], rows[-1]
    lines = []
    for r in rows:
        captured = gain_captured(rows, r.name)
        changes = f"{r.num_changes} of {r.num_priced} priced" if r.num_priced else str(r.num_changes)
        lines.append([r.name, f"{r.mean_imbalance:.3f}", changes, f"{r.served / static.served:.4f}x",
                      f"{100 * (r.served / static.served - 1):+.2f}%", "-" if captured is None else f"{captured:.0%}"])
    return table(["row", "time-weighted max/mean", "changes", "served vs static", "gain over static",
                  "share of the bound's gain"], lines) + [
        "", f"Bound over static: {100 * (best.served / static.served - 1):+.2f}%."]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.closed_loop_costs")
    p.add_argument("--hours", type=float, default=0.5)
    p.add_argument("--layers", type=int, default=16, help="MoE layers of the prefill EP32 group (DeepSeek-V3: 58)")
    p.add_argument("--engines", nargs="+", choices=list(ENGINE_COSTS), default=list(ENGINE_COSTS))
    p.add_argument("--workloads", nargs="+", type=int, choices=range(len(WORKLOADS)), default=[0, 1],
                   help="; ".join(f"{i}: {w.name}" for i, w in enumerate(WORKLOADS)))
    p.add_argument("--out", default=f"closed-loop-costs-{datetime.date.today()}.md")
    p.add_argument("--no-write", action="store_true")
    args = p.parse_args(argv)
    shape = replace(PREFILL, name=f"prefill EP32, {args.layers} MoE layers", num_layers=args.layers)
    sections = []
    for workload in [WORKLOADS[i] for i in args.workloads]:
        trace = make_trace(shape, workload, args.hours)
        for engine in args.engines:
            rows = run_case(trace, engine)
            cost = ENGINE_COSTS[engine]
            sections.append("\n".join([f"### {engine} ({cost.stall_seconds:g} s a change), {workload.name}", "",
                                       *report(rows)]))
            print(sections[-1] + "\n", flush=True)
    text = (f"# Closed loop with change costs: static, EPLB, moectl, moectl pricing, the bound "
            f"({datetime.date.today()})\n\n{platform.machine()}, {os.cpu_count()} cores, numpy {np.__version__}; "
            f"{shape.name}, {args.hours:g} h of {WINDOW_SECONDS:g} s windows, seed 0.\n\n" + "\n\n".join(sections)
            + "\n")
    if not args.no_write:
        path = pathlib.Path(__file__).resolve().parent / "results" / args.out
        path.write_text(text)
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
