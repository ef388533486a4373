"""The model config: the shipped checkpoint's, and one written before `topk` was spelled `top_k`."""

from __future__ import annotations

import json

from agents.runtime.config import CHECKPOINT_DIR, ModelConfig


def test_the_shipped_checkpoint_config_loads():
    cfg = ModelConfig.load(CHECKPOINT_DIR / "config.json")
    assert (cfg.num_experts, cfg.num_groups, cfg.top_k, cfg.topk_group) == (32, 4, 4, 2)


def test_a_checkpoint_config_with_the_old_topk_key_still_loads(tmp_path):
    model = json.loads((CHECKPOINT_DIR / "config.json").read_text())["model"]
    model["topk"] = 3  # as `moectl train` wrote it before the rename
    del model["top_k"]
    (tmp_path / "config.json").write_text(json.dumps({"model": model}))
    assert ModelConfig.load(tmp_path / "config.json").top_k == 3
