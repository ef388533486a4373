"""The sidecar's side of SGLang's live path (live_plugin.py runs inside SGLang): the plugin's records of each EPLB
rebalance read as one window's dump, the placement SGLang runs, and the controller's placement armed. File I/O on
the shared directory (agents/adapters/state_dir.py) and nothing else.

Where the sidecar stopped reading is a position (epoch, call): a record of a newer epoch says SGLang restarted
(its calls count from 0 again, and what was armed for the old life is gone)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from agents.adapters import state_dir
from agents.adapters.arming import ArmedPlacement, arm_call, in_force
from agents.adapters.faults import Faults
from agents.adapters.sglang.location_file import location_map
from agents.adapters.sglang.model import EngineModel
from agents.protocol import PlacementTable


def model_key(model: EngineModel) -> str:
    """The key of SGLang's records of this model (every hidden layer, state_dir.model_key)."""
    return state_dir.model_key(model.num_hidden_layers, model.shape.num_experts)


def records_as_dump(directory: Path, model: EngineModel, after: state_dir.Position | None,
                    faults: Faults | None = None) -> tuple[dict, state_dir.Position | None, dict | None]:
    """The rebalances recorded after `after` as one stat dump (dump.py reads it: a row per rebalance, each
    [num_hidden_layers, num_experts]), the newest position read (`after` when none), and the plugin's fault counts
    in the newest record (None when none was read)."""
    records = state_dir.read_loads(directory, after, model=model_key(model), faults=faults)
    shape = (model.num_hidden_layers, model.shape.num_experts)
    rows = [np.asarray(r["weight"]) for r in records] or [np.zeros(shape, dtype=np.int64)]
    newest = (records[-1]["epoch"], records[-1]["call"]) if records else after
    plugin_faults = records[-1].get("faults") if records else None
    return {"rank": 0, "logical_count": np.stack(rows), "average_utilization_rate_over_window": None}, newest, \
        plugin_faults


def running(directory: Path, model: EngineModel, position: state_dir.Position | None, otherwise: PlacementTable,
            faults: Faults | None = None) -> PlacementTable:
    """The placement in force since rebalance `position`: the armed one of that epoch whose call has come, else
    `otherwise`."""
    if position is None:
        return otherwise
    armed = in_force(state_dir.read_armed(directory, faults=faults), position[1], epoch=position[0],
                     model=model_key(model))
    if armed is None:
        return otherwise
    return PlacementTable(armed.table[list(model.moe_layer_ids)], version=armed.version)


def arm(directory: Path, model: EngineModel, slot_to_expert: np.ndarray, version: int, num_slots: int,
        position: state_dir.Position) -> ArmedPlacement | None:
    """Arms the controller's [num_moe_layers, num_slots] table as SGLang's full map for the rebalance after next of
    the epoch of `position`; None when `version` is armed already for that epoch. Raises PlacementRefused (nothing
    armed) when an expert would lose its every slot, OSError when the directory cannot be written."""
    full = location_map(slot_to_expert, model, num_slots)
    epoch, call = position
    if any(a.version == version and a.epoch == epoch for a in state_dir.read_armed(directory)):
        return None  # its rebalance has not come yet: arming it again would push it further off
    entry = ArmedPlacement(version, arm_call(call), full, epoch, model_key(model))
    state_dir.arm(directory, entry)
    return entry
