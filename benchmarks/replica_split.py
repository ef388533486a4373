"""Per-step imbalance with the window's fixed shares vs the dispatch-time split vs the per-step bound, on the same
steps: the bundled runtime at EP 4 (real steps over gloo) and the simulator at DeepSeek-V3's shape (EP32 prefill,
EP320 decode with 1 and 3 slots per GPU), with the modelled step time of each (agents/sim/cost.py).

Each number is token-weighted over steps and MoE layers (sum of the busiest GPU over sum of the mean GPU: an MoE step
lasts as long as its busiest GPU). The split is agents/protocol/replica_split.py; the bound is its cut certificate,
which no split of the same counts can beat. Placements: EPLB's solve (benchmarks/baselines/eplb.py) of the window
mean with its even shares, and moectl's solver under each objective (window_mean; step_split for a split pool).

    python -m benchmarks.replica_split [--steps 32] [--runtime-steps 24] [--no-runtime] [--no-write]
"""

from __future__ import annotations

import argparse
import datetime
import os
import pathlib
import platform
import sys
import time

import numpy as np

from agents.protocol import replica_split
from agents.protocol.placement import PlacementTable
from agents.sim.cost import GPU_NODES, Traffic, step_times
from agents.sim.load import LoadModel
from agents.sim.workloads import SERVING
from benchmarks.baselines.eplb import Eplb
from controlplane.solve.placement.algorithm import MigrationAware
from controlplane.solve.placement.step_split import solve_for_split
from controlplane.solve.placement.topology import Topology

# (name, GPUs, slots per GPU, tokens per GPU and step): DeepSeek's prefill (EP32, 16,384 tokens per GPU, as SGLang's
# profile) and decode (EP320; 128 sequences per GPU, ~1.8 tokens each with MTP)
SHAPES = [("prefill EP32, 9 slots/GPU", 32, 9, 16_384), ("decode EP320, 1 slot/GPU", 320, 1, 230),
          ("decode EP320, 3 slots/GPU", 320, 3, 230)]
NUM_LAYERS, NUM_EXPERTS, TOP_K, NUM_GROUPS = 58, 256, 8, 8
TRAFFIC = Traffic(off_gpu_share=0.9, node_copies_per_row=0.12)  # a DeepSeek-style group limit's reach, roughly


def ratio(gpu_load: np.ndarray) -> float:
    """[N, L, G] tokens -> sum of per-step busiest over sum of mean."""
    return float(gpu_load.max(-1).sum() / gpu_load.mean(-1).sum())


def modelled_seconds(busiest: np.ndarray, mean: np.ndarray, tokens_per_gpu: float) -> float:
    """[N, L] busiest and mean GPU tokens -> the steps' modelled seconds (each layer waits for its busiest GPU)."""
    total = 0.0
    for b, m in zip(busiest, mean, strict=True):
        rows = np.stack([b, m], axis=1)  # the cost model reads the busiest GPU of each layer
        total += step_times(rows, tokens_per_gpu, TRAFFIC, GPU_NODES).forward_seconds
    return total


def compare(steps: np.ndarray, table: PlacementTable, num_gpus: int, tokens_per_gpu: float) -> list[str]:
    """steps [N, L, E] under `table`: shares / split / bound max-over-mean and modelled time (split vs shares)."""
    gpus, share = replica_split.replica_gpus(table.slot_to_expert, table.slot_share, NUM_EXPERTS, num_gpus)
    shares = replica_split.gpu_load_of(replica_split.fixed_split(steps, share), gpus, num_gpus)
    started = time.perf_counter()
    split = replica_split.gpu_load_of(replica_split.balance_split(steps, gpus, share, num_gpus), gpus, num_gpus)
    per_layer_ms = 1e3 * (time.perf_counter() - started) / (steps.shape[0] * steps.shape[1])
    bound = replica_split.split_bound(steps, gpus, split)
    mean = split.mean(-1)
    t_shares = modelled_seconds(shares.max(-1), mean, tokens_per_gpu)
    t_split = modelled_seconds(split.max(-1), mean, tokens_per_gpu)
    t_bound = modelled_seconds(bound, mean, tokens_per_gpu)
    return [f"{ratio(shares):.3f}", f"{ratio(split):.3f}", f"{float(bound.sum() / mean.sum()):.3f}",
            f"{1e3 * t_shares / len(steps):.1f}", f"{1e3 * t_split / len(steps):.1f} ({t_shares / t_split - 1:+.1%})",
            f"{1e3 * t_bound / len(steps):.1f}", f"{per_layer_ms:.2f}"]


def simulated(num_steps: int, seed: int = 0) -> list[str]:
    head = ["shape", "placement", "max/mean, window shares", "split", "per-step bound", "ms/step, shares",
            "split (gain)", "bound", "split solve ms/layer (NumPy, host)"]
    rows = []
    for name, num_gpus, slots_per_gpu, tokens_per_gpu in SHAPES:
        load = LoadModel(NUM_LAYERS, NUM_EXPERTS, TOP_K, seed=seed, **SERVING.load_kwargs())
        window = load.route(load.popularity(), tokens_per_gpu * num_gpus * 100, np.random.default_rng([seed, 1]))
        steps = load.route_steps(load.popularity(), num_steps, tokens_per_gpu * num_gpus,
                                 np.random.default_rng([seed, 2]))
        topology = Topology(num_gpus // 8, 8, slots_per_gpu, NUM_GROUPS)
        eplb = Eplb().solve(window, topology)
        mean_plan = MigrationAware().solve(window, topology)
        step_plan = solve_for_split(MigrationAware(), window, topology, step_tokens=tokens_per_gpu * num_gpus * TOP_K)
        for label, plan in (("EPLB (even shares)", eplb), ("moectl, window_mean objective", mean_plan),
                            ("moectl, step_split objective", step_plan)):
            table = PlacementTable(plan.slot_to_expert, plan.slot_share)
            rows.append([name, label, *compare(steps, table, num_gpus, tokens_per_gpu)])
            print(" | ".join(rows[-1]), flush=True)
    return table_lines(head, rows)


def runtime_steps(num_steps: int) -> list[str]:
    """The bundled runtime, EP 4 x 10 slots, a placement with replicas and uneven window shares, dispatch_split "on":
    per real step the group's busiest GPU under the split (measured: every rank's rows equal the split's quotas),
    under the fixed shares (the counterfactual from the same gathered counts) and the bound."""
    from agents.runtime.launch import run_group

    per_rank = run_group(runtime_worker, 4, (num_steps,), timeout=600)
    steps = per_rank[0]
    split, shares, bound, tokens = (np.array([s[k] for s in steps]) for k in range(4))  # [N, L] each
    mean = tokens / 4  # every rank reports the group's numbers; rank 0's are the group's
    head = ["EP 4, real steps", "max/mean, window shares", "split (measured)", "per-step bound", "steps"]
    row = ["bundled runtime, 40 slots, uneven window shares", f"{shares.sum() / mean.sum():.3f}",
           f"{split.sum() / mean.sum():.3f}", f"{bound.sum() / mean.sum():.3f}", str(len(steps))]
    print(" | ".join(row), flush=True)
    return table_lines(head, [row])


def runtime_worker(rank: int, size: int, num_steps: int) -> list[tuple]:
    import inspect
    import json
    import textwrap

    import torch

    from agents.runtime.config import CHECKPOINT_DIR, EngineConfig
    from agents.runtime.engine import Engine
    from agents.runtime.ep import EPGroup
    from agents.runtime.model import load_checkpoint
    from agents.runtime.placement import Placement
    from agents.runtime.sequence import SamplingParams

    model = load_checkpoint(CHECKPOINT_DIR)
    cfg = EngineConfig(ep_size=size, ep_rank=rank, slots_per_rank=10, overlap_shared_expert=False,
                       dispatch_split="on", num_kv_blocks=256)
    eng = Engine(cfg, group=EPGroup(rank, size), model=model)
    g = torch.Generator().manual_seed(0)
    rows, shares = [], []
    for _ in range(4):  # every expert once, 8 hot-ish replicas, window shares drawn uneven as a stale window's are
        row = torch.cat([torch.randperm(32, generator=g), torch.randint(0, 32, (8,), generator=g)])
        rows.append(row[torch.randperm(40, generator=g)])
        shares.append(torch.rand(40, generator=g) + 0.5)
    eng.apply_placement(Placement(torch.stack(rows), torch.stack(shares), version=1))
    texts = [inspect.getsource(json), textwrap.__doc__ or "", inspect.getsource(textwrap)]  # code and prose
    for i in range(8):
        text = texts[(rank + i) % len(texts)]
        start = 97 * (rank * 8 + i) % max(1, len(text) - 200)
        eng.add_request(text[start : start + 160], SamplingParams(max_tokens=num_steps))
    out = []
    while len(out) < num_steps:
        _, st = eng.step()
        m = st.moe
        out.append((m.split_max_tokens.tolist(), m.shares_max_tokens.tolist(), m.bound_max_tokens.tolist(),
                    m.group_tokens.tolist()))
        if eng.is_group_idle:
            break
    return out


def table_lines(head: list[str], rows: list[list[str]]) -> list[str]:
    return ["| " + " | ".join(head) + " |", "|" + "---|" * len(head), *("| " + " | ".join(r) + " |" for r in rows)]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.replica_split")
    p.add_argument("--steps", type=int, default=32, help="simulated steps per shape")
    p.add_argument("--runtime-steps", type=int, default=24)
    p.add_argument("--no-runtime", action="store_true")
    p.add_argument("--no-write", action="store_true")
    args = p.parse_args(argv)
    lines = [f"# Dispatch-time replica split: per-step imbalance ({datetime.date.today()})", "",
             f"{platform.machine()}, {os.cpu_count()} cores, numpy {np.__version__}; workload `{SERVING.name}` "
             f"(agents/sim/workloads.py), {args.steps} steps per shape.", "", "## Simulator, DeepSeek-V3 shape", "",
             *simulated(args.steps)]
    if not args.no_runtime:
        lines += ["", "## Bundled runtime", "", *runtime_steps(args.runtime_steps)]
    text = "\n".join(lines) + "\n"
    if not args.no_write:
        path = pathlib.Path(__file__).resolve().parent / "results" / f"replica-split-{datetime.date.today()}.md"
        path.write_text(text)
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
