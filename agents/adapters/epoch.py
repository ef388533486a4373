"""An engine's epoch: which life of the engine wrote a record or armed a placement.

The plugin counts rearranges from 0 in every new engine process, while its state directory may outlive it (a
shared volume). So a call number alone says nothing across a restart: records and armed placements carry the
epoch of the engine that wrote them, and an older epoch's are ignored and cleared (state_dir.py).

Every process of one engine must share one epoch (rank 0 records, every rank applies the armed placement), so the
first process to ask (the entry point, before the engine starts its workers) puts it in its environment, which
the workers inherit. An epoch reads `<start µs>.<boot id prefix>.<pid>`: it sorts by its start, and two lives on
one node never share one. Only the entry points call `engine_epoch`; tests pass epochs explicitly.
"""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

EPOCH_ENV = "MOECTL_ENGINE_EPOCH"
_EPOCH = re.compile(r"^\d{1,20}\.[0-9a-f]{1,16}\.\d{1,10}$")


def _boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip().replace("-", "")[:8] or "0"
    except OSError:
        return "0"


def new_epoch(now: float | None = None, pid: int | None = None) -> str:
    return f"{int((time.time() if now is None else now) * 1e6)}.{_boot_id()}.{os.getpid() if pid is None else pid}"


def engine_epoch() -> str:
    """This engine's epoch: inherited from the process that started it, else new (and handed down)."""
    epoch = os.environ.get(EPOCH_ENV, "")
    if not is_epoch(epoch):
        epoch = os.environ[EPOCH_ENV] = new_epoch()
    return epoch


def is_epoch(text: object) -> bool:
    return isinstance(text, str) and bool(_EPOCH.match(text))


def epoch_order(epoch: str) -> int:
    """Sort key: the engine's start, in µs (0 for a malformed one: older than any)."""
    return int(epoch.split(".", 1)[0]) if is_epoch(epoch) else 0
