"""What one placement switch of the bundled runtime takes on this machine: the call each rank times as its stall
(agents/runtime/engine.py `_agree` around `ExpertParallel.apply_placement`), at `moectl up`'s shape.

    python -m benchmarks.bundled_switch [--switches 50] [--ep-size 4] [--slots-per-rank 20]

A switch moves nothing between ranks: every rank holds all experts' weights (agents/runtime/moe.py) and gathers its
own slots' rows from them (agents/runtime/ep.py `apply_placement`: `moe.w13.detach().cpu()[local].to(device)`, the
same for w2), all of them at every switch, however few slots moved. The ranks agree on the step in `_agree`'s
all-reduce, which runs every step whether or not a switch is due, so it is not part of the switch's cost.
One process, one thread: each rank's gather is timed in turn (ranks switch in parallel, so the group's stall is
about one rank's).
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from agents.runtime.config import CHECKPOINT_DIR
from agents.runtime.ep import EPGroup, ExpertParallel
from agents.runtime.model import load_checkpoint
from agents.runtime.placement import Placement


def random_placement(num_layers: int, num_experts: int, num_slots: int, version: int, gen) -> Placement:
    """Every expert on a slot, the rest random replicas, in a random order: [L, S]."""
    rows = []
    for _ in range(num_layers):
        extra = torch.randint(num_experts, (num_slots - num_experts,), generator=gen)
        row = torch.cat([torch.arange(num_experts), extra])
        rows.append(row[torch.randperm(num_slots, generator=gen)])
    return Placement(torch.stack(rows), version=version)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--switches", type=int, default=50)
    parser.add_argument("--ep-size", type=int, default=4)
    parser.add_argument("--slots-per-rank", type=int, default=20)  # moectl up: max(2, 80 // ep_size)
    args = parser.parse_args()
    torch.set_num_threads(1)
    model = load_checkpoint(CHECKPOINT_DIR).eval()
    cfg, gen = model.cfg, torch.Generator().manual_seed(0)
    ranks = [ExpertParallel(cfg, EPGroup(r, args.ep_size), args.slots_per_rank, "cpu") for r in range(args.ep_size)]
    num_slots = args.slots_per_rank * args.ep_size
    for ep in ranks:
        ep.apply_placement(Placement.default(cfg.num_moe_layers, cfg.num_experts, num_slots), model.moes)
    seconds = []
    for version in range(1, args.switches + 1):
        placement = random_placement(cfg.num_moe_layers, cfg.num_experts, num_slots, version, gen)
        for ep in ranks:
            started = time.perf_counter()
            ep.apply_placement(placement, model.moes)
            seconds.append(time.perf_counter() - started)
    moe = model.moes[0]
    expert_bytes = (moe.w13[0].numel() + moe.w2[0].numel()) * moe.w13.element_size()
    rank_bytes = cfg.num_moe_layers * args.slots_per_rank * expert_bytes
    seconds.sort()
    print(f"{args.switches} switches x {args.ep_size} ranks, {cfg.num_moe_layers} MoE layers x {args.slots_per_rank} "
          f"slots a rank, {expert_bytes / 1024:.0f} KiB an expert ({moe.w13.dtype}): each rank gathers "
          f"{rank_bytes / 2**20:.2f} MiB a switch, none of it from another rank")
    print(f"seconds a rank's switch: median {statistics.median(seconds):.5f}, "
          f"p90 {seconds[int(0.9 * len(seconds))]:.5f}, max {seconds[-1]:.5f}, mean {statistics.fmean(seconds):.5f}")


if __name__ == "__main__":
    main()
