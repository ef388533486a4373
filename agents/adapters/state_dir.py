"""The directory an engine's processes and moectl share where a plugin inside the engine picks the placement at
the engine's own rebalance (vLLM's policy plugin, $MOECTL_VLLM_STATE_DIR; SGLang's live plugin).

`load-<call>.json`: what the plugin saw at rebalance `call`, one object with these keys. `call`; `at` (unix
seconds); `weight` [layers, num_logical] tokens (global, over the engine's load window); `current` [layers,
num_replicas], the map in force before it (or null); `num_replicas`; `num_ranks`; and the engine's version under
its name (vllm, sglang). Written once per call by rank 0 (every rank holds the same). vLLM's layers are its MoE
layers; SGLang's every hidden one.
`placements.json`: the armed placements, [{version, from_call, table}], newest last, the last MAX_ARMED kept.
Each file is replaced whole (written aside, then renamed), so a reader never sees half of one.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np

from agents.adapters.arming import ArmedPlacement

MAX_ARMED = 4
MAX_LOADS = 64  # records kept for the sidecar (one a rearrange: hours of them at vLLM's 3000-step interval)


def _replace(path: Path, text: str) -> None:
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    temporary.write_text(text)
    os.replace(temporary, path)


def write_load(directory: Path, record: dict) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    _replace(directory / f"load-{record['call']:08d}.json", json.dumps(record, separators=(",", ":")))
    for old in sorted(directory.glob("load-*.json"))[:-MAX_LOADS]:
        old.unlink(missing_ok=True)


def read_loads(directory: Path, after_call: int = -1) -> list[dict]:
    """Records of calls after `after_call`, oldest first."""
    out = []
    for path in sorted(Path(directory).glob("load-*.json")):
        try:
            record = json.loads(path.read_text())
        except (OSError, ValueError):
            continue  # pruned while we listed
        if record.get("call", -1) > after_call:
            out.append(record)
    return out


def read_armed(directory: Path) -> list[ArmedPlacement]:
    path = Path(directory) / "placements.json"
    if not path.exists():
        return []
    return [ArmedPlacement(int(e["version"]), int(e["from_call"]), np.asarray(e["table"], dtype=np.int64))
            for e in json.loads(path.read_text())]


def write_armed(directory: Path, armed: list[ArmedPlacement]) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    entries = [{"version": a.version, "from_call": a.from_call, "table": a.table.tolist()} for a in armed[-MAX_ARMED:]]
    _replace(Path(directory) / "placements.json", json.dumps(entries, separators=(",", ":")))
