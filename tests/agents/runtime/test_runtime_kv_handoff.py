"""Prefill on one engine, hand the KV over (as bytes), decode on another: the same tokens as one
unified engine, with and without MTP drafts on the decode side, and with the decode side already
caching part of the prompt."""

from __future__ import annotations

import pytest
import torch

from agents.runtime.config import EngineConfig, ModelConfig
from agents.runtime.engine import Engine
from agents.runtime.kv_transfer import KVHandoff, export_kv, import_kv
from agents.runtime.model import Transformer
from agents.runtime.sequence import SamplingParams

PROMPTS = ["def fibonacci(n):\n    if n < 2:\n        return n\n", "The quick brown fox",
           "import os\nimport sys\n\nclass Config:\n    def __init__(self, path):\n        self.path = path\n"]
PARAMS = SamplingParams(max_tokens=12)


def engine(num_speculative_tokens: int = 2) -> Engine:
    torch.manual_seed(0)  # every engine gets the same (untrained) weights
    model = Transformer(ModelConfig(max_seq_len=256))
    return Engine(EngineConfig(num_speculative_tokens=num_speculative_tokens, num_kv_blocks=64, max_num_seqs=8),
                  model=model)


def prefill(prefill_engine: Engine, prompt: str, request_id: str) -> bytes:
    prefill_engine.add_request(prompt, PARAMS, request_id)
    while True:
        outputs, _ = prefill_engine.step()
        if any(o.request_id == request_id and o.new_token_ids for o in outputs):
            return export_kv(prefill_engine, request_id).to_bytes()


def decode(decode_engine: Engine, payload: bytes) -> list[int]:
    handoff = KVHandoff.from_bytes(payload)
    assert import_kv(decode_engine, handoff)
    tokens = [handoff.token_ids[-1]]
    while decode_engine.has_unfinished_requests():
        outputs, _ = decode_engine.step()
        tokens += [t for o in outputs if o.request_id == handoff.request_id for t in o.new_token_ids]
    return tokens


@pytest.fixture(scope="module")
def unified_tokens() -> list[list[int]]:
    return engine(0).generate(PROMPTS, PARAMS)


@pytest.mark.parametrize("decode_spec", [0, 2])
def test_handoff_gives_the_tokens_of_a_unified_instance(unified_tokens, decode_spec):
    prefill_engine, decode_engine = engine(2), engine(decode_spec)
    for i, prompt in enumerate(PROMPTS):
        payload = prefill(prefill_engine, prompt, f"r{i}")
        assert decode(decode_engine, payload) == unified_tokens[i], prompt
    assert not prefill_engine.seqs and prefill_engine.block_manager.num_free_blocks == 64  # all released
    if decode_spec:
        assert decode_engine.step()[1].spec_draft_tokens == 0  # idle now; drafts were verified before


def test_a_prompt_the_decode_side_caches_is_handed_off_too(unified_tokens):
    prefill_engine, decode_engine = engine(2), engine(2)
    decode(decode_engine, prefill(prefill_engine, PROMPTS[2], "warm"))  # decode side now caches its blocks
    query, hit = decode_engine.block_manager.num_query_tokens, decode_engine.block_manager.num_hit_tokens
    assert decode(decode_engine, prefill(prefill_engine, PROMPTS[2], "again")) == unified_tokens[2]
    assert (decode_engine.block_manager.num_query_tokens, decode_engine.block_manager.num_hit_tokens) == (query, hit)


def test_a_payload_that_does_not_fit_is_refused():
    payload = prefill(engine(2), PROMPTS[1], "x")
    handoff = KVHandoff.from_bytes(payload)
    with pytest.raises(ValueError, match="size"):
        KVHandoff.from_bytes(payload[:-4])
    handoff.kv = handoff.kv[:, :, :-1]
    with pytest.raises(ValueError):
        import_kv(engine(2), handoff)
