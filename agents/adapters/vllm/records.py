"""The policy's records of one window (state.py) -> the window's per-expert load and the map vLLM runs. Pure.

A record's `weight` is vLLM's global logical load over its load window (`EPLBConfig.window_size` steps) at one
rearrange; a window of the grid gets the records whose rearrange fell in it, summed. `current` is the map in
force before the newest record's rearrange, which vLLM then replaced with what the policy returned. So the map it
runs now is the placement armed for that call when there was one, else unknown to us (vLLM's own policy chose).
"""

from __future__ import annotations

import numpy as np

from agents.adapters.errors import EngineFormatError
from agents.protocol import MAX_COUNT, ModelShape

# state_dir.py; previous_seconds (since 2026-12-06): the seconds the model's call before this one took, timed
RECORD_KEYS = frozenset({"epoch", "model", "call", "at", "weight", "current", "num_replicas", "num_ranks", "faults",
                         "vllm", "previous_seconds"})


def window_load(records: list[dict], model: ModelShape, *, version: str) -> np.ndarray:
    """records: the window's, any order -> [num_layers, num_experts] int64 tokens. Raises EngineFormatError naming
    the field and vLLM's version where a record does not fit the model (nothing is then posted)."""
    total = np.zeros((model.num_layers, model.num_experts), dtype=np.int64)
    for record in records:
        where = f"load record {record.get('call', '?')}"
        unknown = sorted(set(record) - RECORD_KEYS)
        if unknown or "weight" not in record:
            raise EngineFormatError("vllm", version, where,
                                    f"has keys {sorted(record)}; expected {sorted(RECORD_KEYS)}")
        weight = np.asarray(record["weight"])
        if weight.shape != total.shape:
            raise EngineFormatError("vllm", version, f"{where} weight", f"has shape {list(weight.shape)}; the model "
                                    f"needs [{model.num_layers}, {model.num_experts}] (MoE layers, logical experts)")
        if not np.issubdtype(weight.dtype, np.integer) or (weight < 0).any():
            raise EngineFormatError("vllm", version, f"{where} weight", "must hold non-negative integer counts")
        total += weight.astype(np.int64)
    if (total > MAX_COUNT).any():
        raise EngineFormatError("vllm", version, "weight", f"sums past {MAX_COUNT} tokens in a window")
    return total


def layout(record: dict) -> tuple[int, int]:
    """(ep_size, num_slots) of the group that wrote `record`."""
    return int(record["num_ranks"]), int(record["num_replicas"])
