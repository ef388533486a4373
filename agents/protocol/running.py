"""The placement a rank runs, sent back to a controller that does not know it, and the refusal that asks for it."""

from __future__ import annotations

import json

import numpy as np

from agents.protocol.array import Array
from agents.protocol.wire import _Frozen


class RunningPlacement(_Frozen):
    """The placement table a rank runs, sent only to a controller that refused the snapshot's
    placement_version as never issued (a 409 with code `PLACEMENT_UNKNOWN`: its database was restored or
    replaced). The controller adopts it as that version and the loop goes on from what the fleet runs.

    slot_to_expert: [num_layers, ep_size * slots_per_rank] int64, the whole EP group's table.
    slot_share: same shape, non-negative weights of an expert's tokens over its replicas; None: even split.
    """

    slot_to_expert: Array
    slot_share: Array | None = None

    def check(self, num_layers: int, num_experts: int, num_slots: int) -> None:
        """Raises ValueError naming what makes the table one no rank can run."""
        table = self.slot_to_expert.to_numpy()
        if table.shape != (num_layers, num_slots) or self.slot_to_expert.dtype != "int64":
            raise ValueError(f"running_placement.slot_to_expert is {self.slot_to_expert.dtype} "
                             f"{list(table.shape)}, the pool needs int64 {[num_layers, num_slots]}")
        if table.min() < 0 or table.max() >= num_experts:
            raise ValueError(f"running_placement.slot_to_expert holds expert ids outside 0..{num_experts - 1}")
        held = np.zeros((num_layers, num_experts), bool)
        held[np.arange(num_layers)[:, None], table] = True
        if not held.all():
            layer = int(np.flatnonzero(~held.all(axis=1))[0])
            raise ValueError(f"running_placement.slot_to_expert: layer {layer} gives no slot to experts "
                             f"{np.flatnonzero(~held[layer]).tolist()[:8]}")
        if self.slot_share is not None:
            share = self.slot_share.to_numpy()
            if share.shape != table.shape or not np.isfinite(share).all() or (share < 0).any():
                raise ValueError("running_placement.slot_share must be finite, non-negative and shaped like "
                                 "slot_to_expert")


# the `code` beside `detail` in the body of a 409 that refuses a snapshot's placement_version as never issued
PLACEMENT_UNKNOWN = "placement_version_unknown"


def error_code(body: bytes) -> str | None:
    """The `code` of a controller's error body (e.g. PLACEMENT_UNKNOWN); None when it has none."""
    try:
        data = json.loads(body)
    except ValueError:
        return None
    return data.get("code") if isinstance(data, dict) else None
