"""The workers' cumulative counts -> one window's per-expert load (agents/adapters/vllm/count_window.py), and the
plugins' refusal of a vLLM version they were not checked against (counting.py). Pure."""

from __future__ import annotations

import numpy as np
import pytest

from agents.adapters.errors import EngineFormatError
from agents.adapters.vllm.count_window import cumulative, window_counts
from agents.adapters.vllm.counting import unsupported
from agents.protocol import ModelShape

MODEL = ModelShape(name="tiny", num_layers=2, num_experts=4, num_groups=1, top_k=2)


def record(rank: int, counts, *, epoch: str = "1-1", tp_rank: int = 0, layers=(1, 2), **changes) -> dict:
    return {"format": 1, "epoch": epoch, "seq": 0, "at": 1.0, "vllm": "0.32.0", "rank": rank, "tp_rank": tp_rank,
            "dp_rank": rank, "ep_size": 2, "layers": list(layers), "counts": counts, "num_failures": 0} | changes


def test_dp_ranks_add_tp_copies_do_not_and_a_restarted_rank_counts_from_its_start():
    before = cumulative([record(0, [[1, 0, 0, 1], [0, 2, 0, 0]]), record(1, [[5, 5, 5, 5], [0, 0, 0, 0]])], MODEL,
                        version="0.32.0")
    after = cumulative([record(0, [[3, 0, 0, 1], [0, 2, 4, 0]]), record(2, [[9] * 4, [9] * 4], tp_rank=1),
                        record(1, [[1, 0, 0, 0], [0, 0, 0, 1]], epoch="2-2")], MODEL, version="0.32.0")
    assert window_counts(before, after).tolist() == [[3, 0, 0, 0], [0, 0, 4, 1]]
    assert after.ep_size == 2


@pytest.mark.parametrize(("workers", "says"), [
    ([record(0, [[0] * 4] * 2, format=0)], "this sidecar reads format 1"),
    ([record(0, [[0] * 4] * 3, layers=(1, 2, 3))], "another model's state dir"),
    ([record(0, [[0] * 4 + [1] * 4] * 2)], "the model has 4 logical experts"),
])
def test_another_deployment_or_format_is_refused_naming_what(workers, says):
    with pytest.raises(EngineFormatError, match=says):
        cumulative(workers, MODEL, version="0.32.0")


def test_counts_going_backwards_within_an_epoch_are_refused():
    before = cumulative([record(0, [[2] * 4] * 2)], MODEL, version="0.32.0")
    with pytest.raises(EngineFormatError, match="backwards"):
        window_counts(before, cumulative([record(0, [[1] * 4] * 2)], MODEL, version="0.32.0"))
    assert np.asarray(window_counts(before, before)).sum() == 0


def test_an_unsupported_vllm_is_refused_saying_which_are_supported():
    assert unsupported("0.32.0") is None and unsupported("0.34.0") is None
    message = unsupported("0.33.1")
    assert "0.32.0, 0.34.0" in message and "not 0.33.1" in message and "nothing installed" in message
