"""The controller's placement -> SGLang's --init-expert-location JSON (agents/adapters/sglang/location_file.py):
dense layers included, every logical expert covered, and accepted by SGLang's own loader."""

from __future__ import annotations

import json

import numpy as np
import pytest
from support.engines.sglang_run import run_sglang

from agents.adapters.errors import PlacementRefused
from agents.adapters.sglang.location_file import location_file, location_map, table_of
from agents.adapters.sglang.model import deepseek_model

DEEPSEEK_V3 = {"n_routed_experts": 256, "num_hidden_layers": 61, "first_k_dense_replace": 3, "n_group": 8,
               "topk_group": 4, "num_experts_per_tok": 8, "moe_layer_freq": 1}
MODEL = deepseek_model(DEEPSEEK_V3, name="deepseek-v3")
NUM_SLOTS, EP_SIZE = 288, 8  # 256 experts + 32 redundant over EP8: 36 slots a GPU


def _hot_replicated(seed: int = 0) -> np.ndarray:
    """[58, 288]: every expert once, in a shuffled order, then 32 replicas of the layer's hottest experts."""
    rng = np.random.default_rng(seed)
    return np.stack([np.r_[rng.permutation(256), rng.choice(16, 32)] for _ in range(58)])


def test_dense_layers_get_the_trivial_layout_and_moe_layers_the_table():
    table = _hot_replicated()
    full = location_map(table, MODEL, NUM_SLOTS)
    assert full.shape == (61, 288)
    assert (full[:3] == np.arange(288) % 256).all()
    assert (full[3:] == table).all()
    assert (table_of(location_file(table, MODEL, NUM_SLOTS), MODEL) == table).all()


def test_only_the_key_the_loader_accepts():
    assert list(location_file(_hot_replicated(), MODEL, NUM_SLOTS)) == ["physical_to_logical_map"]


def test_a_placement_that_drops_an_expert_is_refused_before_anything_is_written(tmp_path):
    table = _hot_replicated()
    table[10, table[10] == 42] = 7  # MoE layer 10 loses every replica of expert 42
    with pytest.raises(PlacementRefused, match=r"MoE layer 10: experts \[42\]"):
        location_file(table, MODEL, NUM_SLOTS)


@pytest.mark.parametrize("bad", [np.zeros((58, 256), dtype=np.int64), np.full((58, 288), 256), np.zeros((58, 288))])
def test_a_table_of_another_shape_or_ids_is_refused(bad):
    with pytest.raises(PlacementRefused):
        location_map(bad, MODEL, NUM_SLOTS)


@pytest.mark.slow
def test_sglangs_own_loader_accepts_the_file_on_a_deepseek_v3_config(tmp_path):
    """compute_initial_expert_location_metadata (SGLang's code) reads what we wrote for a DeepSeek-V3 config with
    32 redundant experts over EP8: the same map, 61 layers of 288 slots, every logical expert at least once."""
    table = _hot_replicated()
    path = tmp_path / "placement.json"
    path.write_text(json.dumps(location_file(table, MODEL, NUM_SLOTS)))
    meta = run_sglang("validate", str(path), "--ep-size", str(EP_SIZE), "--redundant", "32")
    assert (meta["num_layers"], meta["num_physical_experts"], meta["num_logical_experts"]) == (61, 288, 256)
    assert meta["min_replicas"] >= 1
    assert np.array_equal(np.asarray(meta["physical_to_logical_map"])[3:], table)
