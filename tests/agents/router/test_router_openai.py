"""The official `openai` client against the router, over a prefill and a decode worker (real engines)."""

from __future__ import annotations

import httpx
import openai
import pytest
from support.servers import until
from support.serving import router, worker

LONG = "def parse(path):\n    with open(path) as f:\n        return [line.split(',') for line in f]\n" * 2
SHORT = "Hello"


@pytest.fixture(scope="module")
def stack():
    with worker("prefill") as (prefill_url, _, _), worker("decode") as (decode_url, decode_loop, decode_registry):
        with router([(prefill_url, "prefill"), (decode_url, "decode")], threshold=32) as (url, r):
            yield {"url": url, "router": r, "decode_registry": decode_registry}


@pytest.fixture
def client(stack) -> openai.OpenAI:
    return openai.OpenAI(base_url=stack["url"] + "/v1", api_key="unused", max_retries=0, timeout=60)


def routes(stack) -> dict[str, float]:
    registry = stack["router"].metrics.registry
    return {k: registry.get_sample_value("moectl_router_routes_total", {"route": k}) for k in ("pd", "local")}


def test_models_lists_the_served_model(client):
    assert [m.id for m in client.models.list().data] == ["moectl-tiny"]


def test_completion_and_its_stream_agree(client, stack):
    before = routes(stack)
    full = client.completions.create(model="moectl-tiny", prompt=LONG, max_tokens=12)
    choice = full.choices[0]
    assert full.object == "text_completion" and choice.finish_reason == "length"
    assert full.usage.completion_tokens == 12 and full.usage.prompt_tokens == len(LONG.encode())
    assert routes(stack)["pd"] - before["pd"] == 1  # long prompt: prefill rank, KV hand-off, decode rank
    chunks = list(client.completions.create(model="moectl-tiny", prompt=LONG, max_tokens=12, stream=True))
    assert "".join(c.choices[0].text for c in chunks) == choice.text
    assert chunks[-1].choices[0].finish_reason == "length"
    # the decode rank now caches the prompt's blocks: too few uncached tokens to be worth a hand-off
    assert routes(stack)["local"] - before["local"] == 1


def test_chat_completion_and_its_stream_agree(client, stack):
    messages = [{"role": "system", "content": "You write Python."}, {"role": "user", "content": SHORT}]
    full = client.chat.completions.create(model="moectl-tiny", messages=messages, max_tokens=10)
    assert full.object == "chat.completion" and full.choices[0].message.role == "assistant"
    assert full.usage.completion_tokens == 10
    stream = client.chat.completions.create(model="moectl-tiny", messages=messages, max_tokens=10, stream=True)
    chunks = list(stream)
    assert chunks[0].object == "chat.completion.chunk" and chunks[0].choices[0].delta.role == "assistant"
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == full.choices[0].message.content


def test_pd_hand_off_and_local_prefill_produce_the_same_text(client, stack):
    r = stack["router"]
    r.threshold = 10_000  # every prompt prefills on the decode rank
    local = client.completions.create(model="m", prompt=LONG + "x = 1\n", max_tokens=16).choices[0].text
    r.threshold = 0  # every prompt goes prefill -> decode
    before = routes(stack)
    handed = client.completions.create(model="m", prompt=LONG + "x = 1\n", max_tokens=16).choices[0].text
    r.threshold = 32
    assert routes(stack)["pd"] == before["pd"] + 1
    assert handed == local
    assert r.metrics.registry.get_sample_value("moectl_router_kv_transfer_bytes_total") > 0


def test_stop_strings_and_bad_requests(client, stack):
    text = client.completions.create(model="m", prompt=SHORT, max_tokens=20).choices[0].text
    stop = next((ch for ch in text[1:] if ch.isascii() and ch.isalnum()), None)  # untrained weights: any text
    if stop:
        cut = client.completions.create(model="m", prompt=SHORT, max_tokens=20, stop=[stop]).choices[0]
        assert cut.finish_reason == "stop" and cut.text == text[: text.index(stop)]
    with pytest.raises(openai.BadRequestError):
        client.completions.create(model="m", prompt="x" * 600, max_tokens=10)  # past max_seq_len 512
    assert httpx.post(stack["url"] + "/v1/completions", json={"prompt": 3}).status_code == 422


def test_decode_agent_saw_the_requests(client, stack):
    value = stack["decode_registry"].get_sample_value
    labels = {"deployment": "tiny", "role": "decode", "ep_rank": "0"}
    before = value("moectl_generation_tokens_total", labels)  # this worker may have run none of the tests above
    client.completions.create(model="m", prompt=LONG, max_tokens=12)  # prefill rank, then the decode rank
    until("the decode agent counts the tokens", lambda: value("moectl_generation_tokens_total", labels) > before,
          timeout=10, interval=0.05)
    assert value("moectl_spec_decode_draft_tokens_total", labels) > 0
    assert value("moectl_forward_seconds_total", labels) > 0
