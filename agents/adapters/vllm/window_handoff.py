"""The worker's counts handed to the sidecar: a reader thread writes each rank's cumulative counts into the state
directory (state_dir.write_counts) every `seconds`; vLLM's API server serves them (count_route.py).

Why a file of cumulative counts: the workers are processes apart from the API server that the sidecar talks to, and
vLLM gives plugins no channel between them (its `collective_rpc` route is dev-mode only). Cumulative counts make the
hand-off lossless and idempotent: a missed or repeated read loses nothing, the sidecar takes differences
(count_window.py), and a restarted engine shows a new `epoch`. One small write a second per rank.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from pathlib import Path

from agents.adapters import state_dir as state
from agents.adapters.faults import Faults
from agents.adapters.vllm.expert_counts import ExpertCounter

log = logging.getLogger("moectl.adapter.vllm")
COUNTS_FORMAT = 1


def _ranks() -> dict:
    """This worker's place: global rank, and its TP / DP / EP sizes and ranks where vLLM's groups are up."""
    out = {"rank": 0, "tp_rank": 0, "dp_rank": 0, "ep_size": 1}
    try:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            out["rank"] = dist.get_rank()
        from vllm.distributed import parallel_state as ps

        out["tp_rank"] = ps.get_tensor_model_parallel_rank()
        out["dp_rank"] = ps.get_dp_group().rank_in_group
        out["ep_size"] = ps.get_ep_group().world_size
    except Exception:  # noqa: BLE001 (groups not up: a single process)
        pass
    return out


def start_reader(counter: ExpertCounter, state_dir: Path, *, seconds: float, version: str,
                 faults: Faults | None = None) -> threading.Thread:
    """A daemon thread writing `counts-<rank>.json` every `seconds` while the process lives. A write that fails (the
    directory full, gone or read-only) is counted and logged once a cause (faults.py), not at every period: vLLM's
    log is not flooded, and the next write that works hands over everything since (the counts are cumulative)."""
    epoch = f"{os.getpid()}-{time.time():.3f}"
    faults = faults or Faults(log)

    def loop() -> None:
        seq = 0
        while True:
            time.sleep(seconds)
            try:
                ranks = _ranks()
                snapshot = counter.snapshot()
                state.write_counts(state_dir, ranks["rank"], {
                    "format": COUNTS_FORMAT, "epoch": epoch, "seq": seq, "at": time.time(), "vllm": version,
                    **ranks, "layers": list(snapshot), "counts": list(snapshot.values()),
                    "num_failures": counter.num_failures})
                seq += 1
            except Exception as exc:  # noqa: BLE001 (a reader failure must not end the process's other threads)
                faults.record(f"expert counts not written ({type(exc).__name__})", exc)

    thread = threading.Thread(target=loop, name="moectl-expert-counts", daemon=True)
    thread.start()
    return thread
