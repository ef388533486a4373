"""The check every placement passes before an adapter writes it anywhere: each logical expert keeps a replica.

SGLang's loader does not check it: a logical expert without a physical slot divides by zero in its static
dispatch (its loader `sglang.srt.eplb.expert_location`). vLLM's rearrange would drop the expert's weights.
So the adapter refuses such a table itself, before any file is written or any rank answered.
"""

from __future__ import annotations

import numpy as np

from agents.adapters.errors import PlacementRefused
from agents.protocol.placement import replica_counts


def check_covers_every_expert(slot_to_expert: np.ndarray, num_experts: int, num_slots: int) -> np.ndarray:
    """slot_to_expert: [num_layers, num_slots] logical expert per physical slot -> the same, as int64.

    Raises PlacementRefused naming the first layer and experts without a slot, or a shape or id that does not
    fit (num_slots slots, experts 0..num_experts - 1).
    """
    table = np.asarray(slot_to_expert)
    if table.ndim != 2 or table.shape[1] != num_slots:
        raise PlacementRefused(f"placement has shape {list(table.shape)}; the engine runs {num_slots} slots per layer")
    if not np.issubdtype(table.dtype, np.integer):
        raise PlacementRefused(f"placement holds {table.dtype} values, not expert ids")
    table = table.astype(np.int64)
    if table.size and (table.min() < 0 or table.max() >= num_experts):
        raise PlacementRefused(f"placement names experts outside 0..{num_experts - 1}")
    counts = replica_counts(table, num_experts)
    missing = np.argwhere(counts == 0)
    if len(missing):
        layer = int(missing[0, 0])
        experts = [int(e) for e in missing[missing[:, 0] == layer, 1][:8]]
        raise PlacementRefused(f"placement leaves {len(missing)} (layer, expert) pairs without a replica, first "
                               f"at MoE layer {layer}: experts {experts}; refused before anything was written")
    return table
