"""A `stat` recorder dump -> one window's per-expert load. Pure: the loaded dict in, counts out.

SGLang's `stat` recorder keeps a circular buffer of [buffer_size, num_hidden_layers, num_logical_experts]
int32 counts, one row per forward pass, summed over the EP group's ranks. A dump writes it (rank 0,
`expert_distribution_recorder_<time>.pt`, keys in names.py) and zeroes it, without rewinding the write index.
So after the sidecar's previous dump every row not written since is zero, and the window's load is the sum
of the rows written since: the non-zero ones. When every row is non-zero the buffer may have wrapped (more
passes than rows since the last dump), and the oldest passes of the window were overwritten. The counts are
then the window's last `buffer_size` passes, flagged `is_truncated` (a longer buffer or a shorter window
fixes it).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from agents.adapters.errors import EngineFormatError
from agents.adapters.sglang.model import EngineModel
from agents.adapters.sglang.names import DUMP_KEYS
from agents.protocol import MAX_COUNT


@dataclass(frozen=True)
class WindowLoad:
    """expert_tokens: [num_moe_layers, num_experts] int64 tokens routed to each logical expert over the window.
    num_passes: forward passes recorded; is_truncated: the buffer may have wrapped (module doc)."""

    expert_tokens: np.ndarray
    num_passes: int
    is_truncated: bool
    utilization: float | None


def window_load(dump: dict, model: EngineModel, *, version: str) -> WindowLoad:
    """dump: what `torch.load(path, map_location="cpu")` returned, tensors as they are (anything with .numpy())
    or NumPy arrays. Raises EngineFormatError naming the field and SGLang's version where the dump is not a
    `stat` dump of this model (another recorder mode, another model, a newer format)."""
    if not isinstance(dump, dict):
        raise EngineFormatError("sglang", version, "dump", f"is a {type(dump).__name__}, not a dict")
    if "logical_count" not in dump:
        other = "records" if "records" in dump else None
        hint = " (a per_pass/per_token dump: start SGLang with --expert-distribution-recorder-mode stat)" \
            if other else ""
        raise EngineFormatError("sglang", version, "logical_count", f"missing; the dump has keys {sorted(dump)}{hint}")
    unknown = sorted(set(dump) - set(DUMP_KEYS))
    if unknown:
        raise EngineFormatError("sglang", version, "dump", f"has keys {unknown} this adapter does not know "
                                f"(expects {list(DUMP_KEYS)})")
    raw = dump["logical_count"]
    counts = np.asarray(raw.numpy() if hasattr(raw, "numpy") else raw)
    expected = (model.num_hidden_layers, model.shape.num_experts)
    if counts.ndim != 3 or counts.shape[1:] != expected:
        raise EngineFormatError("sglang", version, "logical_count", f"has shape {list(counts.shape)}; a stat dump "
                                f"of this model is [buffer_size, {expected[0]}, {expected[1]}]")
    if not np.issubdtype(counts.dtype, np.integer):
        raise EngineFormatError("sglang", version, "logical_count", f"holds {counts.dtype}, not integer counts")
    if (counts < 0).any():
        raise EngineFormatError("sglang", version, "logical_count", "holds negative counts")
    is_filled = counts.reshape(counts.shape[0], -1).any(axis=1)
    dense = np.setdiff1d(np.arange(model.num_hidden_layers), model.moe_layer_ids)
    if counts[:, dense, :].any():
        raise EngineFormatError("sglang", version, "logical_count", f"counts tokens in dense layers "
                                f"{[int(i) for i in dense]}: not this model's layout")
    total = counts[is_filled][:, list(model.moe_layer_ids), :].astype(np.int64).sum(axis=0)
    if (total > MAX_COUNT).any():
        raise EngineFormatError("sglang", version, "logical_count", f"sums past {MAX_COUNT} tokens in a window")
    utilization = dump.get("average_utilization_rate_over_window")
    return WindowLoad(total, int(is_filled.sum()), bool(is_filled.all()) and len(is_filled) > 0,
                      None if utilization is None else float(utilization))
