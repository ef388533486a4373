"""A `stat` recorder dump -> the window's per-expert load (agents/adapters/sglang/dump.py): the rows filled since
the last dump, dense layers dropped, and a dump of another shape or mode refused with its field named."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from support.engines.sglang_run import run_sglang

from agents.adapters.errors import EngineFormatError
from agents.adapters.sglang.dump import window_load
from agents.adapters.sglang.model import deepseek_model
from agents.processes import free_port

SMALL = {"n_routed_experts": 16, "num_hidden_layers": 5, "first_k_dense_replace": 1, "n_group": 4, "topk_group": 2,
         "num_experts_per_tok": 2}
MODEL = deepseek_model(SMALL, name="small")


def _dump(buffer: np.ndarray) -> dict:
    return {"rank": 0, "logical_count": torch.from_numpy(buffer.astype(np.int32)),
            "average_utilization_rate_over_window": None}


def test_sums_the_filled_rows_and_drops_dense_layers():
    buffer = np.zeros((8, 5, 16), dtype=np.int32)
    buffer[2, 1:, 3] = 7  # the write index need not be 0 after a dump: rows are not in time order
    buffer[3, 1:, 0] = 5
    load = window_load(_dump(buffer), MODEL, version="0.5.23")
    assert load.expert_tokens.shape == (4, 16) and load.expert_tokens.dtype == np.int64
    assert load.expert_tokens[:, 3].tolist() == [7] * 4 and load.expert_tokens[:, 0].tolist() == [5] * 4
    assert load.num_passes == 2 and not load.is_truncated


def test_a_full_buffer_is_flagged_as_possibly_wrapped():
    buffer = np.ones((4, 5, 16), dtype=np.int32)
    buffer[:, 0] = 0
    load = window_load(_dump(buffer), MODEL, version="0.5.23")
    assert load.is_truncated and load.num_passes == 4


@pytest.mark.parametrize(("dump", "field"), [
    ({"rank": 0, "records": [], "last_physical_to_logical_map": None}, "logical_count"),
    ({"rank": 0, "logical_count": torch.zeros(8, 61, 256, dtype=torch.int32),
      "average_utilization_rate_over_window": None}, "logical_count"),
    ({"rank": 0, "logical_count": torch.zeros(8, 5, 16), "average_utilization_rate_over_window": None},
     "logical_count"),
    ({"rank": 0, "logical_count": torch.zeros(8, 5, 16, dtype=torch.int32), "average_utilization_rate_over_window":
      None, "global_physical_count": 1}, "dump"),
])
def test_a_malformed_dump_is_refused_naming_its_field_and_the_version(dump, field):
    with pytest.raises(EngineFormatError) as refused:
        window_load(dump, MODEL, version="0.5.23")
    assert refused.value.field == field
    assert str(refused.value).startswith(f"sglang 0.5.23: {field}:")


def test_tokens_in_a_dense_layer_mean_another_model():
    buffer = np.zeros((8, 5, 16), dtype=np.int32)
    buffer[0, 0, 1] = 3
    with pytest.raises(EngineFormatError, match="dense layers"):
        window_load(_dump(buffer), MODEL, version="0.5.23")


@pytest.mark.slow
def test_the_engines_own_recorder_dumps_read_as_each_windows_load(tmp_path):
    """SGLang's recorder and stat accumulator (its code, on CPU) fed physical top-k ids over two windows with a
    replica: each dump reads back as exactly the tokens its window routed to each logical expert."""
    rng = np.random.default_rng(0)
    num_slots = 20  # 16 experts + 4 redundant, 4 ranks of 5
    p2l = np.tile(np.arange(num_slots) % 16, (5, 1))
    windows, expected = [], []
    for num_passes in (3, 5):
        passes, total = [], np.zeros((4, 16), dtype=np.int64)
        for _ in range(num_passes):
            topk = [[]] + [rng.choice(num_slots, size=(6, 2), p=np.r_[[0.3], np.full(19, 0.7 / 19)]).tolist()
                           for _ in range(4)]
            for layer in range(1, 5):
                np.add.at(total[layer - 1], p2l[layer][np.asarray(topk[layer]).ravel()], 1)
            passes.append(topk)
        windows.append(passes)
        expected.append(total)
    spec = tmp_path / "passes.json"
    spec.write_text(json.dumps({"num_layers": 5, "num_experts": 16, "ep_size": 4, "redundant": 4, "port": free_port(),
                                "physical_to_logical_map": p2l.tolist(), "windows": windows}))
    dumps = tmp_path / "dumps"
    files = run_sglang("dump", str(dumps), "--passes", str(spec), "--buffer-size", "16")["files"]
    assert len(files) == 2
    for name, want in zip(files, expected, strict=True):
        load = window_load(torch.load(dumps / name, map_location="cpu", weights_only=True), MODEL, version="0.5.23")
        assert np.array_equal(load.expert_tokens, want)
        assert not load.is_truncated
