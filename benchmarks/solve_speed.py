"""How long the planner's migration-aware solve takes at DeepSeek-V3 scale, and what it plans, for this tree's
solver and a reference commit's side by side in one run.

The solve the reconcile pass runs when it rebalances (controlplane/solve/placement/solver.py `solve_placement` with the
applied table and a moves budget) on the two pools of issue 15: decode EP320 (40 nodes x 8 GPUs, one slot per GPU,
320 slots) and prefill EP32 (4 nodes x 8 GPUs, 9 slots per GPU, 288 slots, with and without group locality);
58 MoE layers x 256 experts, 8 groups. Each case starts from the agents' default table (slot s holds expert
s mod 256: a new deployment's first rebalance, as in benchmarks/scale.py's fleet) or from EPLB's solve of the
starting load (as benchmarks/closed_loop.py does), and runs `--steps` rebalances in a row: before each, the load
drifts for six 5 s windows (agents/sim/load.py; 30 s, the default cooldown), and the solver gets the six windows'
routed tokens and the default policy's budget (25% of the residencies), and its plan becomes the applied table.

Reported per case and solver: solve seconds (median and max over the steps, each the best of `--repeats` runs,
single thread), as the process's CPU time, which stands for an idle core on a shared machine (its wall time,
which other jobs inflate, beside it), and the plans' quality: mean over steps of the plan's max/mean (mean over
layers), of its worst layer, and moved slots. The reference solver runs in a child process on `git archive
<commit>` of its packages, interleaved with this tree's, so both see the same machine load.

    OMP_NUM_THREADS=1 nice -n 5 python -m benchmarks.solve_speed [--reference main] [--steps 4] [--repeats 2]
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import pathlib
import subprocess
import sys
import tarfile
import tempfile
import time

import numpy as np

REPO = pathlib.Path(__file__).resolve().parents[1]
CASES = {  # name: (nodes, gpus per node, slots per gpu, group locality)
    "decode EP320": (40, 8, 1, False),
    "prefill EP32 global": (4, 8, 9, False),
    "prefill EP32 group-local": (4, 8, 9, True),
}
NUM_LAYERS, NUM_EXPERTS, NUM_GROUPS, TOP_K = 58, 256, 8, 8
WINDOWS_PER_STEP, TOKENS_PER_GPU_WINDOW = 6, 3_700 * 5
STARTS = ("default", "eplb")
BUDGET_FRACTION = 0.25  # controlplane/desired.py's default max_moved_slots_fraction


def run_case(name: str, start: str, steps: int, repeats: int, seed: int, drift_sigma: float) -> dict:
    """One case on the solver importable here: per step, solve seconds and the plan's numbers."""
    from agents.protocol.placement import default_slot_to_expert, layer_imbalance
    from agents.sim.load import LoadModel
    from benchmarks.baselines.eplb import Eplb
    from controlplane.solve.placement.solver import solve_placement
    from controlplane.solve.placement.topology import Topology

    nodes, gpn, k, is_local = CASES[name]
    topology = Topology(nodes, gpn, k, NUM_GROUPS)
    model = LoadModel(NUM_LAYERS, NUM_EXPERTS, TOP_K, seed=seed, drift_sigma=drift_sigma)
    rng = np.random.default_rng([seed, 1])
    table = default_slot_to_expert(NUM_LAYERS, NUM_EXPERTS, topology.num_slots) if start == "default" else \
        Eplb().solve(model.popularity(0.0), topology, group_locality=is_local).slot_to_expert
    budget = int(BUDGET_FRACTION * table.size)
    tokens = TOKENS_PER_GPU_WINDOW * topology.num_gpus // TOP_K
    result = {"seconds": [], "wall": [], "imbalance": [], "worst_layer": [], "moved": []}
    for _ in range(steps):
        load = np.zeros((NUM_LAYERS, NUM_EXPERTS))
        for _ in range(WINDOWS_PER_STEP):
            model.drift()
            load += model.route(model.popularity(0.0), tokens, rng)
        cpu, wall = [], []
        for _ in range(repeats):
            started, started_cpu = time.perf_counter(), time.process_time()
            plan = solve_placement(load, topology, current=table, max_moved_slots=budget, group_locality=is_local)
            cpu.append(time.process_time() - started_cpu)
            wall.append(time.perf_counter() - started)
        result["seconds"].append(min(cpu))
        result["wall"].append(min(wall))
        result["imbalance"].append(plan.imbalance)
        result["worst_layer"].append(float(np.nanmax(layer_imbalance(plan.gpu_load))))
        result["moved"].append(plan.num_moved_slots)
        table = plan.slot_to_expert
    return result


def _reference_tree(commit: str, into: pathlib.Path) -> pathlib.Path:
    """The packages the solve imports, as of `commit`, unpacked under `into`."""
    archive = into / "reference.tar"
    subprocess.run(["git", "-C", str(REPO), "archive", "-o", str(archive), commit, "agents", "controlplane",
                    "benchmarks"], check=True)
    with tarfile.open(archive) as tar:
        tar.extractall(into / "tree", filter="data")
    return into / "tree"


def _in_child(tree: pathlib.Path, args: list[str]) -> dict:
    env = dict(os.environ, PYTHONPATH=str(tree), OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    out = subprocess.run([sys.executable, str(pathlib.Path(__file__).resolve()), "--child", *args],
                         env=env, cwd=tree, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def _cells(r: dict) -> list[str]:
    s, wall = np.array(r["seconds"]), np.array(r["wall"])
    return [f"{np.median(s):.3f}", f"{s.max():.3f}", f"{np.median(wall):.3f} / {wall.max():.3f}",
            f"{np.mean(r['imbalance']):.4f}", f"{np.mean(r['worst_layer']):.3f}", f"{np.mean(r['moved']):.0f}"]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.solve_speed")
    p.add_argument("--reference", default="main", help="git commit whose solver runs beside this tree's")
    p.add_argument("--no-reference", action="store_true")
    p.add_argument("--cases", nargs="+", choices=list(CASES), default=list(CASES))
    p.add_argument("--starts", nargs="+", choices=STARTS, default=list(STARTS))
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--drift", type=float, nargs="+", default=[0.02], help="lognormal drift per window")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        out = {f"{c}|{s}|{d}": run_case(c, s, args.steps, args.repeats, args.seed, d)
               for c in args.cases for s in args.starts for d in args.drift}
        print(json.dumps(out))
        return 0
    head = ["case", "start", "drift", "solver", "median CPU s", "max CPU s", "wall s median / max", "max/mean",
            "worst layer", "moved slots"]
    print("| " + " | ".join(head) + " |\n|" + "---|" * len(head), flush=True)
    with tempfile.TemporaryDirectory(prefix="solve-speed-") as tmp:
        tree = None if args.no_reference else _reference_tree(args.reference, pathlib.Path(tmp))
        for case, start, drift in itertools.product(args.cases, args.starts, args.drift):
            one = ["--cases", case, "--starts", start, "--drift", str(drift), "--steps", str(args.steps),
                   "--repeats", str(args.repeats), "--seed", str(args.seed)]
            key = f"{case}|{start}|{drift}"
            rows = [("this tree", _in_child(REPO, one)[key])]
            if tree is not None:
                rows.append((args.reference, _in_child(tree, one)[key]))
            for solver, r in rows:
                print("| " + " | ".join([case, start, f"{drift:g}", solver, *_cells(r)]) + " |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
