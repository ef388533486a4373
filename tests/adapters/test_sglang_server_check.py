"""The sidecar's check of the server it sits beside (agents/adapters/sglang/server_check.py), on the fields SGLang's
own ServerArgs resolves for /server_info: it refuses --enable-eplb and other recorder modes, saying which flag."""

from __future__ import annotations

import pytest
from support.engines.sglang_run import run_sglang

from agents.adapters.errors import EngineFormatError
from agents.adapters.sglang.model import deepseek_model
from agents.adapters.sglang.server_check import ServerRefused, check_server

MODEL = deepseek_model({"n_routed_experts": 256, "num_hidden_layers": 61, "first_k_dense_replace": 3, "n_group": 8,
                        "topk_group": 4, "num_experts_per_tok": 8}, name="deepseek-v3")


@pytest.fixture(scope="module")
def info() -> dict:
    """SGLang's resolved server args for EP8 with 32 redundant experts and the stat recorder (its code)."""
    return run_sglang("server-info", "--ep-size", "8", "--redundant", "32")


@pytest.mark.slow
def test_reads_the_layout_of_sglangs_own_server_info(info):
    layout = check_server(info, MODEL)
    assert (layout.version, layout.ep_size, layout.num_slots, layout.slots_per_rank) == ("0.5.23", 8, 288, 36)
    assert layout.buffer_size == 1000


@pytest.mark.slow
def test_refuses_builtin_eplb_saying_why(info):
    with pytest.raises(ServerRefused, match="--enable-eplb: its EPLB dumps the expert-distribution recorder too"):
        check_server(info | {"enable_eplb": True}, MODEL)


@pytest.mark.slow
def test_refuses_another_recorder_mode(info):
    with pytest.raises(ServerRefused, match="--expert-distribution-recorder-mode stat"):
        check_server(info | {"expert_distribution_recorder_mode": "per_pass"}, MODEL)


def test_a_renamed_field_is_named_with_the_version():
    with pytest.raises(EngineFormatError, match=r"sglang 0.6.0: /server_info enable_eplb: missing"):
        check_server({"version": "0.6.0", "expert_distribution_recorder_mode": "stat"}, MODEL)
