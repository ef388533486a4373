"""The controller's placement -> an SGLang `--init-expert-location` JSON. Pure: a table in, a dict out.

SGLang's loader (`compute_initial_expert_location_metadata`) passes a file holding `physical_to_logical_map` to
`init_by_mapping(model_config, **data)`. That key goes alone (any other is a TypeError there). It has one row per
hidden layer (dense layers included) of num_logical_experts + ep_num_redundant_experts slots, slot p on GPU
p // slots_per_gpu, which is moectl's slot order too (agents/protocol/placement.py). Dense layers route no tokens;
their rows get the trivial layout, which is what SGLang runs for them by default. The loader never checks that
every logical expert has a slot, so this module does (agents/adapters/coverage.py) before anything is written.
"""

from __future__ import annotations

import numpy as np

from agents.adapters.coverage import check_covers_every_expert
from agents.adapters.errors import PlacementRefused
from agents.adapters.sglang.model import EngineModel
from agents.adapters.sglang.names import LOCATION_KEY
from agents.adapters.sglang.placement_store import StoredPlacement
from agents.protocol import PlacementTable


def location_map(slot_to_expert: np.ndarray, model: EngineModel, num_slots: int) -> np.ndarray:
    """slot_to_expert: [num_moe_layers, num_slots] the controller's table -> [num_hidden_layers, num_slots] int64
    SGLang's physical_to_logical_map. Raises PlacementRefused when an expert would be left without a slot."""
    shape = model.shape
    table = check_covers_every_expert(slot_to_expert, shape.num_experts, num_slots)
    if table.shape[0] != shape.num_layers:
        raise PlacementRefused(f"placement has {table.shape[0]} layers; the model has {shape.num_layers} MoE layers")
    full = np.tile(np.arange(num_slots, dtype=np.int64) % shape.num_experts, (model.num_hidden_layers, 1))
    full[list(model.moe_layer_ids)] = table
    return full


def location_file(slot_to_expert: np.ndarray, model: EngineModel, num_slots: int) -> dict:
    """The JSON document to write (`json.dumps` it): {"physical_to_logical_map": [[int, ...], ...]}."""
    return {LOCATION_KEY: location_map(slot_to_expert, model, num_slots).tolist()}


def table_of(document: dict, model: EngineModel) -> np.ndarray:
    """The inverse, for a file this adapter wrote: [num_moe_layers, num_slots] int64 (the table a restarted
    server runs, for a controller that lost it)."""
    full = np.asarray(document[LOCATION_KEY], dtype=np.int64)
    return full[list(model.moe_layer_ids)]


def running_table(stored: StoredPlacement | None, started_at: float, model: EngineModel,
                  num_slots: int) -> PlacementTable:
    """The placement a server started at `started_at` (unix seconds) runs.

    It is the stored file's when it was written before the server started (SGLang reads it at start only). Else
    it is the default table, SGLang's trivial layout: a server started before the newest file runs the one before
    it, whose table is not kept."""
    if stored is not None and started_at >= stored.written_at:
        return PlacementTable(table_of(stored.document, model), version=stored.version)
    return PlacementTable.default(model.shape.num_layers, model.shape.num_experts, num_slots)
