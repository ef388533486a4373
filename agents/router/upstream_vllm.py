"""Ranks that are vLLM servers (`moectl router --engine vllm`): their load read from their own /metrics, and a
request's tokens streamed from their OpenAI-compatible `/v1/completions` (the prompt sent as token ids, so the
router's routing by prompt blocks holds; vLLM's text pieces come back with its own token ids)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import httpx
from prometheus_client.parser import text_string_to_metric_families

from agents.adapters.vllm.names import SERVING

ENGINE = "vllm"


def load_of(metrics_text: str) -> tuple[int, int, float]:
    """(requests running, requests waiting, KV-cache usage 0..1) from a vLLM server's /metrics text: requests summed
    over its engines (one sample each, labelled by engine index), the usage their mean. KeyError when a series is
    missing (not a vLLM server)."""
    samples: dict[str, list[float]] = {SERVING.running: [], SERVING.waiting: [], SERVING.kv_usage: []}
    for family in text_string_to_metric_families(metrics_text):
        for sample in family.samples:
            if sample.name in samples:
                samples[sample.name].append(sample.value)
    missing = sorted(name for name, values in samples.items() if not values)
    if missing:
        raise KeyError(f"not in its /metrics: {missing}")
    usage = samples[SERVING.kv_usage]
    return int(sum(samples[SERVING.running])), int(sum(samples[SERVING.waiting])), sum(usage) / len(usage)


async def stream(client: httpx.AsyncClient, url: str, model: str, token_ids: list[int], body: dict
                 ) -> AsyncIterator[tuple[str, int, str | None]]:
    """(text piece, its number of tokens, finish reason or None) as the vLLM server at `url` produces them.
    body: the router's internal request (max_tokens, temperature). A non-200 answer, or an error in the stream,
    raises UpstreamError with vLLM's status and message."""
    request = {"model": model, "prompt": token_ids, "max_tokens": body["max_tokens"],
               "temperature": body["temperature"], "stream": True, "return_token_ids": True}
    async with client.stream("POST", f"{url}/v1/completions", json=request) as response:
        if response.status_code != 200:
            await response.aread()
            raise UpstreamError(response.status_code, _message(response))
        async for line in response.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[len("data: "):])
            if "error" in chunk:
                raise UpstreamError(500, str(chunk["error"].get("message", chunk["error"])))
            for choice in chunk.get("choices", []):
                yield choice.get("text", ""), len(choice.get("token_ids") or []), choice.get("finish_reason")


class UpstreamError(Exception):
    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


def _message(response: httpx.Response) -> str:
    try:
        error = response.json().get("error", response.text)  # vLLM's shape: {"error": {"message": ...}}
        return str(error.get("message", error) if isinstance(error, dict) else error)
    except ValueError:
        return response.text
