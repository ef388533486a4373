"""The placement objective for pools that run the dispatch-time split (agents/protocol/replica_split.py).

Such a pool does not run the window's shares: every step re-splits its replicated experts' tokens over their
replicas, so what a placement decides is which GPUs can absorb a step's surprise, not how the window's mean
divides. Its objective is the per-step LP optimum over the window's steps, not the window mean's max/mean. That
is the sum over steps and layers of the split's busiest GPU over the sum of the mean GPU. (It is token-weighted,
since an MoE step lasts as long as its busiest GPU.)

The controller keeps window sums, not steps, so the steps are sampled. Each expert's count in a step is a Poisson
draw around its share of a step's tokens (a step of n tokens routes n * top_k assignments). The counts of real
steps are over-dispersed against this, so the sampled objective under-states the per-step swing, never invents
it. The solver is the window-mean one, asked to place for the load's per-step peaks (mean + z standard
deviations of a step) at a few z. Every candidate is scored on the same sampled steps and the best is kept. So the
objective never picks worse on those steps than the window-mean plan it includes (z = 0).
Shapes: L layers, E experts, S slots, G GPUs, N sampled steps; loads in tokens.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from agents.protocol.replica_split import balance_split, gpu_load_of, replica_gpus
from controlplane.solve.placement.solver import PlacementPlan, plan_of
from controlplane.solve.placement.topology import Topology

WINDOW_MEAN, STEP_SPLIT = "window_mean", "step_split"  # what a plan minimised (PlacementPlan.objective)
NUM_SAMPLED_STEPS = 16
PEAK_Z = (0.0, 1.0, 2.0)  # z = 0 is the window-mean plan itself


def sampled_steps(load: np.ndarray, step_tokens: float, num_steps: int = NUM_SAMPLED_STEPS,
                  seed: int = 0) -> np.ndarray:
    """load: [L, E] tokens over a window; step_tokens: token-expert assignments one step routes per layer ->
    [N, L, E] int64 counts of `num_steps` steps (Poisson around each expert's share of a step). Seeded: the same
    steps for every candidate."""
    share = load / np.maximum(load.sum(axis=1, keepdims=True), 1e-12)  # [L, E]
    return np.random.default_rng(seed).poisson(share * step_tokens, (num_steps, *load.shape)).astype(np.int64)


def step_split_imbalance(slot_to_expert: np.ndarray, slot_share: np.ndarray | None, steps: np.ndarray,
                         num_gpus: int) -> float | None:
    """The objective: steps [N, L, E] -> sum over steps and layers of the split's busiest GPU over the sum of the
    mean GPU; None without load."""
    gpus, gpu_share = replica_gpus(slot_to_expert, slot_share, steps.shape[-1], num_gpus)
    gpu_load = gpu_load_of(balance_split(steps, gpus, gpu_share, num_gpus), gpus, num_gpus)  # [N, L, G]
    mean = gpu_load.sum() / num_gpus
    return float(gpu_load.max(axis=-1).sum() / mean) if mean > 0 else None


def peak_load(load: np.ndarray, step_tokens: float, z: float) -> np.ndarray:
    """[L, E] window load -> [L, E] the load of a step z standard deviations above each expert's mean (Poisson),
    scaled back to the window's tokens so the solver's thresholds read it as they read the mean."""
    per_step = load / np.maximum(load.sum(axis=1, keepdims=True), 1e-12) * step_tokens  # [L, E]
    peak = per_step + z * np.sqrt(per_step)
    return peak * (load.sum(axis=1, keepdims=True) / max(step_tokens, 1e-12))


def solve_for_split(algorithm, load: np.ndarray, topology: Topology, step_tokens: float,
                    current: np.ndarray | None = None, max_moved_slots: int | None = None, *,
                    group_locality: bool = False) -> PlacementPlan:
    """The STEP_SPLIT objective (module doc) with `algorithm` (solve/placement/algorithm.py) as the candidate
    generator: the plan, reported on `load`, with objective and step_imbalance (its sampled per-step score)."""
    load = np.asarray(load, dtype=np.float64)
    steps = sampled_steps(load, step_tokens)
    best, best_score = None, None
    for z in PEAK_Z:
        solved = algorithm.solve(peak_load(load, step_tokens, z), topology, current=current,
                                 max_moved_slots=max_moved_slots, group_locality=group_locality)
        score = step_split_imbalance(solved.slot_to_expert, solved.slot_share, steps, topology.num_gpus)
        if best is None or (score is not None and (best_score is None or score < best_score - 1e-9)):
            best, best_score = solved, score
    plan = plan_of(best.slot_to_expert, best.slot_share, load, topology, current,
                   is_group_local=best.is_group_local)
    return replace(plan, objective=STEP_SPLIT, step_imbalance=best_score)
