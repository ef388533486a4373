"""The recorder's dump files in the directory SGLang and the sidecar share ($SGLANG_EXPERT_DISTRIBUTION_RECORDER_DIR).

Rank 0 names each dump `expert_distribution_recorder_<time.time()>.pt`; the sidecar reads the newest it has not
read and deletes what it read (the directory would otherwise grow by one file a window).
"""

from __future__ import annotations

import time
from pathlib import Path

import torch

from agents.adapters.sglang.names import DUMP_PREFIX


def _stamp(path: Path) -> float:
    try:
        return float(path.stem[len(DUMP_PREFIX):])
    except ValueError:
        return 0.0


def take_new_dump(directory: Path, *, after: float, timeout: float = 30.0, poll: float = 0.1) -> dict | None:
    """The newest dump stamped after `after` (unix seconds), loaded on the CPU; every dump up to it is deleted.
    None when none appeared within `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        found = sorted((p for p in directory.glob(f"{DUMP_PREFIX}*.pt") if _stamp(p) > after), key=_stamp)
        if found:
            newest = found[-1]
            # SGLang saved it from the GPU; weights_only: a dump is tensors, ints and floats, nothing to execute
            data = torch.load(newest, map_location="cpu", weights_only=True)
            for path in directory.glob(f"{DUMP_PREFIX}*.pt"):
                if _stamp(path) <= _stamp(newest):
                    path.unlink(missing_ok=True)
            return data
        if time.monotonic() > deadline:
            return None
        time.sleep(poll)
