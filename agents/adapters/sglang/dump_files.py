"""The recorder's dump files in the directory SGLang and the sidecar share ($SGLANG_EXPERT_DISTRIBUTION_RECORDER_DIR).

Rank 0 names each dump `expert_distribution_recorder_<time.time()>.pt`; the sidecar reads the newest it has not
read and deletes what it read (the directory would otherwise grow by one file a window). Only names with a
finite time stamp count (an `..._inf.pt` is not the newest of anything), and only regular files: a link is
neither read nor followed. A dump that cannot be loaded (truncated) raises EngineFormatError: that window is not
posted, and the dump is deleted like the others.
"""

from __future__ import annotations

import math
import re
import time
from pathlib import Path

import torch

from agents.adapters.errors import EngineFormatError
from agents.adapters.sglang.names import DUMP_PREFIX

_NAME = re.compile(rf"^{re.escape(DUMP_PREFIX)}(\d+(?:\.\d+)?)\.pt$")


def _stamp(path: Path) -> float | None:
    """The dump's time stamp; None when its name is not one SGLang writes, or it is not a regular file."""
    match = _NAME.match(path.name)
    if match is None or path.is_symlink() or not path.is_file():
        return None
    stamp = float(match[1])
    return stamp if math.isfinite(stamp) else None


def take_new_dump(directory: Path, *, after: float, timeout: float = 30.0, poll: float = 0.1) -> dict | None:
    """The newest dump stamped after `after` (unix seconds), loaded on the CPU; every dump up to it is deleted.
    None when none appeared within `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        stamped = [(s, p) for p in directory.glob(f"{DUMP_PREFIX}*.pt") if (s := _stamp(p)) is not None]
        found = sorted((s, p) for s, p in stamped if s > after)
        if found:
            newest_stamp, newest = found[-1]
            try:
                # SGLang saved it from the GPU; weights_only: a dump is tensors, ints and floats, nothing to execute
                data = torch.load(newest, map_location="cpu", weights_only=True)
            except Exception as exc:  # noqa: BLE001 (torch raises RuntimeError, EOFError, UnpicklingError...)
                raise EngineFormatError("sglang", "?", newest.name, f"cannot be loaded ({exc})") from None
            finally:
                for stamp, path in stamped:
                    if stamp <= newest_stamp:
                        path.unlink(missing_ok=True)
            return data
        if time.monotonic() > deadline:
            return None
        time.sleep(poll)
