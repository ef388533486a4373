"""Start an EP group of local gloo processes on 127.0.0.1, run fn(rank, size, *args) in each."""

import os
import pickle
import traceback

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from agents.processes import free_port


def _entry(fn, rank: int, size: int, port: int, args: tuple, results) -> None:
    os.environ["OMP_NUM_THREADS"] = "1"
    torch.set_num_threads(1)
    try:
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=size)
        results.put((rank, True, pickle.dumps(fn(rank, size, *args))))  # by value, not shared memory
        dist.barrier()
        dist.destroy_process_group()
    except Exception:
        results.put((rank, False, traceback.format_exc()))


def run_group(fn, size: int, args: tuple = (), timeout: float = 120.0) -> list:
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    port = free_port()
    procs = [
        ctx.Process(target=_entry, args=(fn, r, size, port, args, results), daemon=True) for r in range(size)
    ]
    for p in procs:
        p.start()
    out: dict[int, object] = {}
    try:
        for _ in range(size):
            rank, ok, value = results.get(timeout=timeout)
            if not ok:
                raise RuntimeError(f"rank {rank} failed:\n{value}")
            out[rank] = pickle.loads(value)
    finally:
        for p in procs:
            p.join(timeout=10)
            if p.is_alive():
                p.kill()
    return [out[r] for r in range(size)]
