"""The sidecar's side of SGLang's live path (live_plugin.py runs inside SGLang): the plugin's records of each EPLB
rebalance read as one window's dump, the placement SGLang runs, and the controller's placement armed. File I/O on
the shared directory (agents/adapters/state_dir.py) and nothing else."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from agents.adapters import state_dir
from agents.adapters.arming import ArmedPlacement, arm_call, in_force
from agents.adapters.sglang.location_file import location_map
from agents.adapters.sglang.model import EngineModel
from agents.protocol import PlacementTable


def records_as_dump(directory: Path, model: EngineModel, after_call: int) -> tuple[dict, int]:
    """The rebalances recorded after `after_call` as one stat dump (dump.py reads it: a row per rebalance, each
    [num_hidden_layers, num_experts]), and the newest call read (after_call when none)."""
    records = state_dir.read_loads(directory, after_call)
    shape = (model.num_hidden_layers, model.shape.num_experts)
    rows = [np.asarray(r["weight"]) for r in records] or [np.zeros(shape, dtype=np.int64)]
    newest = records[-1]["call"] if records else after_call
    return {"rank": 0, "logical_count": np.stack(rows), "average_utilization_rate_over_window": None}, newest


def running(directory: Path, model: EngineModel, last_call: int, otherwise: PlacementTable) -> PlacementTable:
    """The placement in force since rebalance `last_call`: the armed one whose call has come, else `otherwise`."""
    armed = in_force(state_dir.read_armed(directory), last_call)
    if armed is None:
        return otherwise
    return PlacementTable(armed.table[list(model.moe_layer_ids)], version=armed.version)


def arm(directory: Path, model: EngineModel, slot_to_expert: np.ndarray, version: int, num_slots: int,
        last_call: int) -> ArmedPlacement | None:
    """Arms the controller's [num_moe_layers, num_slots] table as SGLang's full map for the rebalance after next;
    None when `version` is armed already. Raises PlacementRefused (nothing armed) when an expert would lose its
    every slot."""
    full = location_map(slot_to_expert, model, num_slots)
    armed = state_dir.read_armed(directory)
    if any(a.version == version for a in armed):
        return None  # its rebalance has not come yet: arming it again would push it further off
    entry = ArmedPlacement(version, arm_call(last_call), full)
    state_dir.write_armed(directory, [*armed, entry])
    return entry
