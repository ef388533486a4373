"""The SGLang live plugin (agents/adapters/sglang/live_plugin.py) in SGLang's own HookRegistry, around SGLang's own
EPLBManager._compute_expert_location_metadata on a DeepSeek-V3 config (EP8, 32 redundant experts): each rebalance's
load recorded; SGLang's own EPLB layout until a placement is armed; from the armed rebalance on, the placement, as
SGLang's init_by_mapping builds it; an armed placement that drops an expert falls back to SGLang's layout."""

from __future__ import annotations

import json

import numpy as np
import pytest
from support.engines.sglang_run import run_sglang

from agents.adapters import state_dir


@pytest.mark.slow
def test_placements_apply_at_the_armed_rebalance_through_sglangs_own_path(tmp_path):
    rng = np.random.default_rng(0)
    counts = []
    for _ in range(5):
        count = np.zeros((2, 61, 256), dtype=np.int64)
        count[:, 3:] = rng.zipf(1.4, size=(2, 58, 256)).clip(max=5000)
        counts.append(count.tolist())
    ours = np.tile(np.r_[np.arange(256), np.arange(32)], (61, 1))
    dropped = ours.copy()
    dropped[10, dropped[10] == 5] = 6
    spec = {"state_dir": str(tmp_path / "state"), "logical_counts": counts,
            "arm_before": {"1": [{"version": 1, "table": ours.tolist()}],  # armed for rebalance 0 + 2 = 2
                           "3": [{"version": 2, "table": dropped.tolist()}]}}  # armed for 4, refused there
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    maps = [np.asarray(m) for m in run_sglang("live", str(tmp_path / "spec.json"))["maps"]]
    assert not np.array_equal(maps[0], ours) and not np.array_equal(maps[1], ours)  # SGLang's own EPLB
    assert np.array_equal(maps[2], ours) and np.array_equal(maps[3], ours)  # ours, from the armed rebalance
    assert not np.array_equal(maps[4], dropped)  # dropping expert 5 of layer 10: SGLang's own instead
    records = state_dir.read_loads(tmp_path / "state")
    assert [r["call"] for r in records] == [0, 1, 2, 3, 4]
    assert np.array_equal(records[0]["weight"], np.asarray(counts[0]).sum(axis=0))
    assert records[0]["sglang"] == "0.5.23" and records[0]["num_replicas"] == 288
