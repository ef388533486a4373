"""Does the loop pay? Static placement vs periodic from-scratch EPLB vs moectl's loop, closed over a simulated
EP group on drifting workloads.

One EP group of the DeepSeek-V3 shape (58 MoE layers x 256 experts, 8 groups, top-8): the prefill pool's EP32
(4 nodes x 8 GPUs, 9 slots each, 288 slots) and/or the decode pool's EP320 (one slot per GPU, or three: `decode-3`),
`--pools`.
Every 5 s window the workload (agents/sim/load.py: per-layer Zipf popularity, a lognormal walk, a swing between
two kinds of text) routes its tokens, the placement in force spreads them over the GPUs, and the step-time model
(agents/sim/cost.py: each layer waits for its busiest GPU; the all-to-all is priced per row that arrives from
another GPU) times the window. A strategy sees the window and may name a new placement, which the group runs from
the next window on:

- static: the placement every strategy starts from (EPLB's solve of the load at the start, as a deployment
  starts from a recorded distribution), forever;
- periodic EPLB: every K minutes a from-scratch solve (benchmarks/baselines/eplb.py, behind
  controlplane/solve/placement/algorithm.py's PlacementAlgorithm) of the load summed over those K minutes, as SGLang and
  vLLM run it;
- moectl: the real planner (controlplane/plan/placement.py `plan_placement` and its solver, pure, in-process, the clock
  passed in), fed the windows the controller would store, under each policy of MOECTL_POLICIES (threshold, cooldown,
  moves budget).

Each window also samples NUM_STEP_SAMPLES of its steps (the workload's per-step dispersion, agents/sim/load.py
route_steps): the step-level max/mean of the placement in force with the window's fixed shares, with the
dispatch-time split (agents/protocol/replica_split.py) and at the per-step bound, and the modelled tokens/s of
those steps under each. "moectl loop + split" is the same planner for a pool whose ranks route by the split: its
windows say so (the agents' StepLoad counters), so it places for the per-step optimum (solve/placement/step_split.py).
Workloads: agents/sim/workloads.py (calibrated to public DeepSeek-V3/R1 serving figures, and the stress cases).

Reported per strategy: time-weighted max/mean GPU load (mean over windows of the mean over layers), modelled
throughput (tokens / modelled seconds), weights moved per hour (expert residencies (layer, slot) that changed,
as a share of all), and decisions (placement changes). Beside them the oracle, no strategy: a from-scratch solve
of each window's own load, the best any placement could do, which says whether a target is feasible at all
(with one slot per GPU, 256 experts and 64 spare slots cannot spread a Zipf-hot expert thin enough for 1.10).
After each table, issue 15's targets for each moectl policy, met or not (`target_rows`).

    python -m benchmarks.closed_loop [--hours 2] [--pools prefill decode] [--workloads 0 2] [--no-write]
"""

from __future__ import annotations

import argparse
import datetime
import functools
import os
import pathlib
import platform
import sys
import time
from dataclasses import dataclass, field, replace

import numpy as np
import torch

from agents.protocol import replica_split
from agents.protocol.placement import PlacementTable, gpu_load, imbalance
from agents.runtime.placement import Placement
from agents.sim.cost import GPU_NODES, Traffic, step_times
from agents.sim.fleet import MAX_REACH_RANKS, MAX_REACH_TOKENS
from agents.sim.load import LoadModel
from agents.sim.reach import Routing, sample_reach
from agents.sim.workloads import WORKLOADS, Workload
from benchmarks.baselines.eplb import Eplb
from controlplane.desired import Decision, KnobKind, Policy
from controlplane.observed.knob_change import KnobChange
from controlplane.observed.pool import PoolState
from controlplane.observed.window import RANK_REPORTS, Window
from controlplane.plan.placement import plan_placement
from controlplane.solve.placement.solver import solve_placement
from controlplane.solve.placement.topology import Topology

WINDOW_SECONDS = 5.0
STEPS_PER_WINDOW = int(WINDOW_SECONDS * 20)  # as the simulated fleet's windows
HOUR = 3600.0
# what the planner reads: sustained windows and its forecast's history (controlplane/plan/placement.py)
MAX_WINDOWS_KEPT = 48
NUM_STEP_SAMPLES = 4  # steps of each window whose per-step imbalance (shares, split, bound) is measured


@dataclass(frozen=True)
class Shape:
    """The EP group: DeepSeek-V3's MoE on `num_nodes` x `gpus_per_node` GPUs of `slots_per_gpu` slots."""

    name: str
    role: str
    num_nodes: int
    gpus_per_node: int
    slots_per_gpu: int
    tokens_per_window: int  # tokens the group routes in a window
    num_layers: int = 58
    num_experts: int = 256
    num_groups: int = 8
    top_k: int = 8
    topk_group: int = 4

    @property
    def topology(self) -> Topology:
        return Topology(self.num_nodes, self.gpus_per_node, self.slots_per_gpu, self.num_groups)


PREFILL = Shape("prefill EP32", "prefill", num_nodes=4, gpus_per_node=8, slots_per_gpu=9,
                tokens_per_window=32 * 9_200 * 5)
DECODE = Shape("decode EP320", "decode", num_nodes=40, gpus_per_node=8, slots_per_gpu=1,
               tokens_per_window=320 * 3_700 * 5)
# the same decode pool with three slots per GPU (960 slots: 704 redundant): three experts' weights per GPU and layer
# (~7.7 GB at FP8 over the 58 layers, a tenth of an 80 GB GPU) where DeepSeek's EP320 decode keeps one, so that hot
# experts can be spread thin enough for max/mean 1.10 (the oracle: ~2.5-2.9 at one slot, ~1.11-1.17 at two,
# ~1.02-1.04 at three). The step-time model counts rows, not weight reads: at this batch (~500 rows per slot and
# step) an FP8 expert GEMM is compute-bound, so a GPU's time still follows its rows
DECODE_3 = replace(DECODE, name="decode EP320, 3 slots per GPU", slots_per_gpu=3)
SHAPES = {"prefill": PREFILL, "decode": DECODE, "decode-3": DECODE_3}


# the loop's policies: the defaults a new deployment gets (threshold 1.15 for 2 windows, cooldown 30 s, min gain
# 0.05, at most 25% of the residencies per change and 200% per hour), and one whose moves budget can follow a
# swing of the workload (threshold 1.10, 50% per change, 800% per hour): a swing between two kinds of text moves
# most experts' load twice per period, which the default hourly budget cannot pay for
# The third spends the same 800% an hour in small steps: a change after every 5 s window (720 an hour, one window
# sustained, the cooldown one window, each change verified on the one window under it), each moving at most 2% of
# the residencies (334 of prefill EP32's 16,704; past half the hourly budget controlplane/plan/pacing.py holds a change
# to half the budget's even rate, ~93 per 5 s), each move cutting its layer's busiest GPU by at least 4% of the
# layer's mean (min_gain_per_moved_slot), from max/mean 1.05 on. A moved residency is one expert's weights of one
# layer copied to another GPU (DeepSeek-V3: 3 x 7168 x 2048 parameters, ~44 MB at FP8): the whole 800%/h of EP32
# is ~134k copies an hour, ~5.9 TB, ~1.6 GB/s over the group's 32 GPUs, a seventh of EPLB every minute's. Each
# change is also a new table version every rank switches to: 720 an hour against 60.
# The fourth takes the same steps up to 10% of the residencies each, every move cutting at least 2%, within 3200%
# an hour: what the fastest drift needs on a pool of 960 slots (decode EP320 at three slots per GPU, where it
# spends ~1,560%/h: ~870k copies an hour, ~10.6 GB/s over the 320 GPUs, 33 MB/s each). On prefill EP32 it
# balances better than small steps but moves 18-40% of EPLB every minute's (benchmarks/results/
# closed-loop-decode-3-2026-12-02.md): a policy for a pool like decode-3, not for every pool.
SMALL_STEPS = Policy(mode="auto", imbalance_threshold=1.05, sustained_windows=1, min_gain=0.01,
                     cooldown_seconds=WINDOW_SECONDS, max_actions_per_hour=720, max_moved_slots_fraction=0.02,
                     max_moved_slots_per_hour_fraction=8.0, min_gain_per_moved_slot=0.04, verify_windows=1)
MOECTL_POLICIES = {
    "moectl loop (defaults)": Policy(mode="auto"),
    "moectl loop (budget 800%/h)": Policy(mode="auto", imbalance_threshold=1.10, max_moved_slots_fraction=0.5,
                                          max_moved_slots_per_hour_fraction=8.0),
    "moectl loop (small steps)": SMALL_STEPS,
    "moectl loop (steps for fast drift)": SMALL_STEPS.model_copy(update=dict(
        max_moved_slots_fraction=0.1, min_gain_per_moved_slot=0.02, max_moved_slots_per_hour_fraction=32.0)),
}

# issue 15's targets
MAX_BALANCED, MIN_STATIC_SKEW, MIN_SPEEDUP, MAX_MOVES_SHARE = 1.10, 2.0, 1.3, 0.15

POLICY_KNOBS = {"imbalance_threshold", "sustained_windows", "cooldown_seconds", "min_gain", "max_moved_slots_fraction",
                "max_moved_slots_per_hour_fraction", "max_actions_per_hour", "min_gain_per_moved_slot",
                "verify_windows"}


@dataclass
class Outcome:
    strategy: str
    imbalances: list[float] = field(default_factory=list)
    tokens: float = 0.0
    seconds: float = 0.0
    moved: int = 0  # expert residencies (layer, slot) changed
    decisions: int = 0
    plan_seconds: float = 0.0  # wall time the strategy spent deciding
    # the sampled steps (NUM_STEP_SAMPLES a window): step-level max/mean per window with the window's fixed shares,
    # with the dispatch-time split and at its bound; modelled seconds of those steps under shares and under split
    step_shares: list[float] = field(default_factory=list)
    step_split: list[float] = field(default_factory=list)
    step_bound: list[float] = field(default_factory=list)
    step_tokens: float = 0.0
    step_seconds_shares: float = 0.0
    step_seconds_split: float = 0.0

    @property
    def imbalance(self) -> float:
        """Time-weighted max/mean: every window lasts the same 5 s."""
        return float(np.mean(self.imbalances))

    @property
    def throughput(self) -> float:
        return self.tokens / self.seconds

    def moved_per_hour(self, shape: Shape, hours: float) -> float:
        """Residencies moved per hour, as a share of all."""
        return self.moved / (shape.num_layers * shape.topology.num_slots) / hours

    def row(self, shape: Shape, hours: float, static: Outcome) -> list[str]:
        is_oracle = self.strategy == Oracle.name  # it re-places every window for free: no moves to count
        return [self.strategy, f"{self.imbalance:.3f}", f"{np.percentile(self.imbalances, 95):.3f}",
                f"{self.throughput / 1e3:.0f}k", f"{self.throughput / static.throughput:.2f}x",
                "-" if is_oracle else f"{100 * self.moved_per_hour(shape, hours):.1f}%",
                "-" if is_oracle else str(self.decisions), f"{self.plan_seconds:.1f}"]

    def step_row(self, static: Outcome) -> list[str]:
        """Per-step: max/mean with the window's shares, with the split, at the bound (time-weighted over windows),
        and the modelled tokens/s of the sampled steps with shares and with the split (vs static with shares)."""
        base = static.step_tokens / static.step_seconds_shares
        shares, split = self.step_tokens / self.step_seconds_shares, self.step_tokens / self.step_seconds_split
        return [self.strategy, f"{np.mean(self.step_shares):.3f}", f"{np.mean(self.step_split):.3f}",
                f"{np.mean(self.step_bound):.3f}", f"{shares / base:.3f}x", f"{split / base:.3f}x"]


class Oracle:
    """Not a strategy: the best any placement could do in each window, a from-scratch solve
    (controlplane/solve/placement/solver.py) of the window's own load, which no strategy knows before the window runs.
    It bounds what is feasible: a target below its number cannot be met on that workload and shape."""

    name = "oracle: fresh solve of each window's own load"

    def __init__(self, shape: Shape):
        self.shape = shape

    def table_for(self, expert_tokens: np.ndarray) -> PlacementTable:
        plan = solve_placement(expert_tokens, self.shape.topology)
        return PlacementTable(plan.slot_to_expert, plan.slot_share)


class Static:
    name = "static"

    def decide(self, now: float, window: Window, table: PlacementTable) -> PlacementTable | None:
        return None


class PeriodicEplb:
    """From scratch every `period` seconds, on the load seen since its last solve."""

    def __init__(self, shape: Shape, period_seconds: float):
        self.shape, self.period = shape, period_seconds
        self.name = f"EPLB every {period_seconds / 60:g} min" if period_seconds >= 60 else \
            f"EPLB every {period_seconds:.0f} s"
        self.load = np.zeros((shape.num_layers, shape.num_experts))
        self.next_at = period_seconds

    def decide(self, now: float, window: Window, table: PlacementTable) -> PlacementTable | None:
        self.load += window.expert_tokens
        if now < self.next_at:
            return None
        self.next_at = now + self.period
        plan = Eplb().solve(self.load, self.shape.topology)
        self.load[:] = 0
        return PlacementTable(plan.slot_to_expert, plan.slot_share)


class Moectl:
    """The controller's planner on the windows it would have stored, with the bookkeeping the store keeps
    (version, last change, moves, actions and their times in the last hour: what controlplane/plan/pacing.py reads)."""

    def __init__(self, shape: Shape, policy: Policy, name: str = "moectl loop", is_split: bool = False):
        """is_split: the pool's ranks route by the dispatch-time split, and its windows say so."""
        self.shape, self.policy, self.name, self.is_split = shape, policy, name, is_split
        self.windows: list[Window] = []
        self.version, self.last_change_at = 0, None
        self.changes: list[tuple[float, int]] = []  # (when, residencies moved)

    def decide(self, now: float, window: Window, table: PlacementTable) -> PlacementTable | None:
        s = self.shape
        self.windows = [*self.windows, replace(window, placement_version=self.version)][-MAX_WINDOWS_KEPT:]
        recent = [(t, n) for t, n in self.changes if t > now - HOUR]
        state = PoolState(
            deployment="bench", role=s.role, num_layers=s.num_layers, num_experts=s.num_experts,
            num_groups=s.num_groups, ep_size=s.topology.num_gpus, slots_per_rank=s.slots_per_gpu,
            gpus_per_node=s.gpus_per_node, num_agents=s.topology.num_gpus, num_fresh_agents=s.topology.num_gpus,
            placement_version=self.version, slot_to_expert=table.slot_to_expert, slot_share=table.slot_share,
            windows=tuple(self.windows), last_change_at=self.last_change_at,
            moved_slots_last_hour=sum(n for _, n in recent), num_actions_last_hour=len(recent), top_k=s.top_k,
            model_topk_group=s.topk_group,
            changes=tuple(KnobChange(i, KnobKind.placement, t, "verified", 0) for i, (t, _) in enumerate(recent)))
        plan = plan_placement(self.policy, state, now)
        if plan.decision != Decision.rebalance:
            return None
        self.version += 1
        self.last_change_at = now
        self.changes.append((now, plan.change.num_moved_slots))
        return PlacementTable(plan.change.slot_to_expert, plan.change.slot_share)


def initial_table(shape: Shape, load: LoadModel) -> PlacementTable:
    """What every strategy starts from: EPLB's solve of the load at the start, as a deployment starts from a
    recorded expert distribution (SGLang's --init-expert-location); `static` keeps it."""
    plan = Eplb().solve(load.popularity(0.0), shape.topology)
    return PlacementTable(plan.slot_to_expert, plan.slot_share)


@functools.lru_cache(maxsize=8)
def starting_point(shape: Shape, workload: Workload, seed: int) -> tuple[PlacementTable, Traffic]:
    """The starting table and the traffic sampled under it, the same for every strategy on this workload and
    seed: made once, not once per strategy (the sampling is most of a short run's time)."""
    load = LoadModel(shape.num_layers, shape.num_experts, shape.top_k, seed=seed, **workload.load_kwargs())
    table = initial_table(shape, load)
    return table, sampled_traffic(shape, table, load.popularity(0.0), np.random.default_rng([seed, 2]))


def sampled_traffic(shape: Shape, table: PlacementTable, popularity: np.ndarray,
                    rng: np.random.Generator) -> Traffic:
    """What the all-to-all carries under the shape's group limit, sampled once from the starting placement as
    the simulated fleet samples it (agents/sim/fleet.py): every strategy pays the same per row."""
    share = None if table.slot_share is None else torch.tensor(table.slot_share)
    tables = Placement(torch.tensor(table.slot_to_expert), share).routing_tables(shape.num_experts)
    num_gpus = shape.topology.num_gpus
    routing = Routing(shape.num_groups, shape.top_k, shape.topk_group, *tables, shape.slots_per_gpu,
                      shape.gpus_per_node, num_gpus, shape.topk_group)
    num_homes = min(num_gpus, MAX_REACH_RANKS)
    samples = [sample_reach(popularity, MAX_REACH_TOKENS, rng, routing, home_rank=h * num_gpus // num_homes)
               for h in range(num_homes)]
    return sum(samples[1:], samples[0]).traffic(shape.top_k)


_REPLICA_TABLES: dict[int, tuple] = {}  # id(table) -> (table, replica tables): a table is kept for many windows


def replica_tables(shape: Shape, table: PlacementTable) -> tuple[np.ndarray, np.ndarray]:
    """replica_split.replica_gpus of `table`, computed once per table (a Python loop over its slots)."""
    cached = _REPLICA_TABLES.get(id(table))
    if cached is None or cached[0] is not table:
        if len(_REPLICA_TABLES) > 64:
            _REPLICA_TABLES.clear()
        cached = _REPLICA_TABLES[id(table)] = (table, replica_split.replica_gpus(
            table.slot_to_expert, table.slot_share, shape.num_experts, shape.topology.num_gpus))
    return cached[1]


def sample_steps(shape: Shape, table: PlacementTable, steps: np.ndarray, traffic: Traffic, outcome: Outcome) -> dict:
    """The sampled steps [N, L, E] under `table`: adds their per-step imbalance and modelled seconds (fixed shares,
    split) to `outcome`; returns the StepLoad counters a pool routing by the split would post for them."""
    num_gpus = shape.topology.num_gpus
    shares = np.stack([table.gpu_load(step, num_gpus) for step in steps])  # [N, L, G]
    gpus, gpu_share = replica_tables(shape, table)
    split = replica_split.gpu_load_of(replica_split.balance_split(steps, gpus, gpu_share, num_gpus), gpus, num_gpus)
    bound = replica_split.split_bound(steps, gpus, split)  # [N, L]
    mean = split.sum() / num_gpus
    outcome.step_shares.append(float(shares.max(-1).sum() / mean))
    outcome.step_split.append(float(split.max(-1).sum() / mean))
    outcome.step_bound.append(float(bound.sum() / mean))
    tokens_per_step = shape.tokens_per_window / STEPS_PER_WINDOW
    outcome.step_tokens += tokens_per_step * len(steps)
    for rows, attr in ((shares, "step_seconds_shares"), (split, "step_seconds_split")):
        seconds = sum(step_times(r, tokens_per_step / num_gpus, traffic, GPU_NODES).forward_seconds for r in rows)
        setattr(outcome, attr, getattr(outcome, attr) + seconds)
    scale = STEPS_PER_WINDOW / len(steps)  # the window's steps, estimated from the sampled ones
    return {"num_steps": float(STEPS_PER_WINDOW * num_gpus), "step_mean_tokens": mean * scale,
            "step_split_max_tokens": float(split.max(-1).sum()) * scale,
            "step_shares_max_tokens": float(shares.max(-1).sum()) * scale,
            "step_bound_max_tokens": float(bound.sum()) * scale, "step_split_routed_mean_tokens": mean * scale}


def simulate(shape: Shape, workload: Workload, strategy, hours: float, seed: int = 0) -> Outcome:  # noqa: ANN001
    """Runs one strategy on one workload; every strategy sees the same windows (and sampled steps) of the same
    seed."""
    topology = shape.topology
    load = LoadModel(shape.num_layers, shape.num_experts, shape.top_k, seed=seed, **workload.load_kwargs())
    rng = np.random.default_rng([seed, 1])
    step_rng = np.random.default_rng([seed, 3])  # apart from the windows', so they stay what they were
    table, traffic = starting_point(shape, workload, seed)
    outcome = Outcome(strategy.name)
    complete = {f"{RANK_REPORTS}{rank}": 1 for rank in range(topology.num_gpus)}
    for index in range(int(hours * HOUR / WINDOW_SECONDS)):
        start = index * WINDOW_SECONDS
        expert_tokens = load.route(load.popularity(start), shape.tokens_per_window, rng)
        if isinstance(strategy, Oracle):
            table = strategy.table_for(expert_tokens)
        slots = table.slot_load(expert_tokens)
        rows = gpu_load(slots, topology.num_gpus)
        times = step_times(rows, shape.tokens_per_window / topology.num_gpus, traffic, GPU_NODES, STEPS_PER_WINDOW)
        outcome.imbalances.append(imbalance(rows))
        outcome.tokens += shape.tokens_per_window
        outcome.seconds += times.forward_seconds
        steps = load.route_steps(load.popularity(start), NUM_STEP_SAMPLES, shape.tokens_per_window / STEPS_PER_WINDOW,
                                 step_rng)
        step_load = sample_steps(shape, table, steps, traffic, outcome)
        counters = complete | step_load if getattr(strategy, "is_split", False) else complete
        window = Window(index=index, start=start, seconds=WINDOW_SECONDS, placement_version=0,
                        num_reports=topology.num_gpus, num_slot_reports=topology.num_gpus,
                        expert_tokens=expert_tokens, slot_tokens=slots, counters=counters)
        if isinstance(strategy, Oracle):
            load.drift()
            continue
        started = time.perf_counter()
        chosen = strategy.decide(start + WINDOW_SECONDS, window, table)
        outcome.plan_seconds += time.perf_counter() - started
        if chosen is not None:  # the group switches at the next window
            outcome.moved += int((chosen.slot_to_expert != table.slot_to_expert).sum())
            outcome.decisions += 1
            table = chosen
        load.drift()
    return outcome


def target_rows(shape: Shape, hours: float, static: Outcome, oracle: Outcome, eplbs: list[Outcome],
                loops: list[Outcome]) -> list[list[str]]:
    """Issue 15's three targets for each loop: max/mean <= 1.10 where static is >= 2, throughput >= 1.3x static
    (each with the oracle's number, which says whether any placement could), and weights moved <= 15% of
    periodic EPLB's at equal or better imbalance: against the best-balancing EPLB period the loop still
    matches or beats. EPLB would have to move at least that much to balance as well as the loop (a shorter
    period moves more), so the comparison never flatters the loop; against a period that balances worse
    still, it would."""
    rows = []
    for loop in loops:
        balance = f"{loop.imbalance:.3f}; oracle {oracle.imbalance:.3f}"
        if oracle.imbalance > MAX_BALANCED:
            balance += ": infeasible"
        if static.imbalance < MIN_STATIC_SKEW:
            balance = f"n/a (static {static.imbalance:.2f} < {MIN_STATIC_SKEW:g}): {balance}"
        else:
            balance = f"{'met' if loop.imbalance <= MAX_BALANCED else 'NOT met'}: {balance}"
        speedup = loop.throughput / static.throughput
        beaten = [e for e in eplbs if e.imbalance >= loop.imbalance]
        if beaten:
            nearest = min(beaten, key=lambda e: e.imbalance)
            share = loop.moved_per_hour(shape, hours) / nearest.moved_per_hour(shape, hours)
            moves = (f"{'met' if share <= MAX_MOVES_SHARE else 'NOT met'}: {share:.1%} of {nearest.strategy} "
                     f"({loop.imbalance:.3f} vs {nearest.imbalance:.3f})")
        else:
            best = min(eplbs, key=lambda e: e.imbalance)
            moves = f"NOT met: every EPLB period balances better (best {best.strategy}: {best.imbalance:.3f})"
        best = oracle.throughput / static.throughput
        rows.append([loop.strategy, balance,
                     f"{'met' if speedup >= MIN_SPEEDUP else 'NOT met'}: {speedup:.2f}x; oracle {best:.2f}x"
                     + (": infeasible" if best < MIN_SPEEDUP else ""), moves])
    return rows


def table(head: list[str], rows: list[list[str]]) -> list[str]:
    return ["| " + " | ".join(head) + " |", "|" + "---|" * len(head), *("| " + " | ".join(r) + " |" for r in rows)]


def run(shapes: list[Shape], hours: float, eplb_minutes: list[float], policies: dict[str, Policy],
        workloads: list[Workload] = WORKLOADS, split_policies: tuple[str, ...] = ()) -> str:
    """split_policies: the policies also run for a pool that routes by the dispatch-time split."""
    head = ["strategy", "time-weighted max/mean", "p95", "modelled tokens/s", "vs static", "weights moved / h",
            "decisions", "planning s"]
    sections = []
    for shape in shapes:
        for workload in workloads:
            eplbs = [PeriodicEplb(shape, 60 * m) for m in eplb_minutes]
            loops = [Moectl(shape, policy, name) for name, policy in policies.items()]
            loops += [Moectl(shape, policy, f"{name} + split", is_split=True) for name, policy in policies.items()
                      if name in split_policies]
            static, oracle, *rest = [simulate(shape, workload, s, hours)
                                     for s in (Static(), Oracle(shape), *eplbs, *loops)]
            outcomes = [static, oracle, *rest]
            lines = [f"### {shape.name}, {workload.name} ({hours:g} h of {WINDOW_SECONDS:g} s windows)", "",
                     *table(head, [o.row(shape, hours, static) for o in outcomes]), "",
                     *table(["moectl policy", f"max/mean <= {MAX_BALANCED} where static >= {MIN_STATIC_SKEW:g}",
                             f"throughput >= {MIN_SPEEDUP}x static",
                             f"moved <= {MAX_MOVES_SHARE:.0%} of EPLB's at equal or better imbalance"],
                            target_rows(shape, hours, static, oracle, rest[:len(eplbs)], rest[len(eplbs):])), "",
                     f"Per step ({NUM_STEP_SAMPLES} sampled steps a window, the same for every strategy): busiest GPU "
                     "over mean, token-weighted over steps and layers, time-weighted over windows.", "",
                     *table(["strategy", "step max/mean, window shares", "step max/mean, split", "per-step bound",
                             "modelled tokens/s, shares (vs static)", "split (vs static with shares)"],
                            [o.step_row(static) for o in outcomes])]
            sections.append("\n".join(lines))
            print(sections[-1] + "\n", flush=True)
    return "\n\n".join(sections)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.closed_loop")
    p.add_argument("--hours", type=float, default=2.0)
    p.add_argument("--eplb-minutes", type=float, nargs="+", default=[1.0, 10.0])
    p.add_argument("--pools", nargs="+", choices=list(SHAPES), default=["prefill"],
                   help="prefill: EP32, 9 slots per GPU; decode: EP320, one slot per GPU; decode-3: EP320, 3 slots "
                        "per GPU")
    p.add_argument("--workloads", nargs="+", type=int, choices=range(len(WORKLOADS)),
                   default=list(range(len(WORKLOADS))),
                   help="by index: " + "; ".join(f"{i}: {w.name}" for i, w in enumerate(WORKLOADS)))
    p.add_argument("--policies", nargs="+", choices=list(MOECTL_POLICIES), default=list(MOECTL_POLICIES),
                   help="the moectl policies to run")
    p.add_argument("--split-policies", nargs="*", choices=list(MOECTL_POLICIES), default=[],
                   help="also run these for a pool routing by the dispatch-time split")
    p.add_argument("--out", default=None, help="the results file's name (default closed-loop[-pools]-DATE.md)")
    p.add_argument("--no-write", action="store_true")
    args = p.parse_args(argv)
    policies = {name: MOECTL_POLICIES[name] for name in args.policies}
    shapes = [SHAPES[pool] for pool in args.pools]
    text = (f"# Closed loop: static vs periodic EPLB vs moectl ({datetime.date.today()})\n\n"
            f"{platform.machine()}, {os.cpu_count()} cores, numpy {np.__version__}; moectl policies:\n\n"
            + "".join(f"- {name}: {policy.model_dump(include=POLICY_KNOBS)}\n"
                      for name, policy in policies.items())
            + "\n" + run(shapes, args.hours, args.eplb_minutes, policies, [WORKLOADS[i] for i in args.workloads],
                          tuple(args.split_policies))
            + "\n")
    if not args.no_write:
        pools = "" if args.pools == ["prefill"] else "-" + "-".join(args.pools)
        name = args.out or f"closed-loop{pools}-{datetime.date.today()}.md"
        path = pathlib.Path(__file__).resolve().parent / "results" / name
        path.write_text(text)
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
