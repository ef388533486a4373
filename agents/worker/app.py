"""A worker rank's HTTP side: the internal API the router calls, `/metrics` for Prometheus, `/healthz`.

  POST /v1/internal/generate  {request_id, prompt_token_ids, max_tokens, temperature, stop_token_ids}
                              -> NDJSON lines {token_ids, finished, finish_reason}.
  POST /v1/internal/prefill   same body -> the KV hand-off (application/octet-stream), or NDJSON when
                              the request finished with its first token.
  POST /v1/internal/decode    a hand-off -> NDJSON lines of the tokens after the first.
  GET  /v1/internal/load      what the router balances on.
"""

from __future__ import annotations

import asyncio
import json
import uuid

from fastapi import FastAPI, HTTPException, Request, Response
from fastapi.responses import StreamingResponse
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from pydantic import BaseModel, Field

from agents.runtime.kv_transfer import KVHandoff
from agents.runtime.sequence import SamplingParams
from agents.worker.engine_loop import Command, EngineLoop, Stream

HANDOFF_TYPE = "application/octet-stream"
NDJSON_TYPE = "application/x-ndjson"


class GenerateIn(BaseModel):
    request_id: str = Field(default_factory=lambda: uuid.uuid4().hex)
    prompt_token_ids: list[int] = Field(min_length=1)
    max_tokens: int = Field(default=64, ge=1)
    temperature: float = Field(default=0.0, ge=0)
    stop_token_ids: list[int] = []


def create_app(loop: EngineLoop, registry: CollectorRegistry, info: dict) -> FastAPI:
    app = FastAPI(title="moectl worker", version="0.1.0")

    async def start(kind: str, command: Command) -> tuple[Stream, dict]:
        command.stream = Stream(asyncio.get_running_loop())
        loop.submit(command)
        first = await command.stream.get()
        if "error" in first:
            raise HTTPException(400, first["error"])
        return command.stream, first

    def stream_tokens(stream: Stream, first: dict) -> StreamingResponse:
        async def lines():
            item = first
            while True:
                yield json.dumps(item) + "\n"
                if item.get("finished") or "error" in item:
                    return
                item = await stream.get()

        return StreamingResponse(lines(), media_type=NDJSON_TYPE)

    def command(kind: str, body: GenerateIn) -> Command:
        params = SamplingParams(body.temperature, body.max_tokens, tuple(body.stop_token_ids))
        return Command(kind, stream=None, request_id=body.request_id, token_ids=body.prompt_token_ids, params=params)

    @app.post("/v1/internal/generate")
    async def generate(body: GenerateIn) -> StreamingResponse:
        return stream_tokens(*await start("generate", command("generate", body)))

    @app.post("/v1/internal/prefill")
    async def prefill(body: GenerateIn) -> Response:
        stream, first = await start("prefill", command("prefill", body))
        if "handoff" in first:
            return Response(first["handoff"], media_type=HANDOFF_TYPE)
        return stream_tokens(stream, first)  # finished with its first token: nothing to hand off

    @app.post("/v1/internal/decode")
    async def decode(request: Request) -> StreamingResponse:
        try:
            handoff = KVHandoff.from_bytes(await request.body())
        except (ValueError, KeyError) as exc:
            raise HTTPException(422, f"not a KV hand-off: {exc}") from None
        return stream_tokens(*await start("decode", Command("decode", stream=None, handoff=handoff)))

    @app.get("/v1/internal/load")
    def load() -> dict:
        threshold = loop.agent.local_prefill_threshold
        return info | loop.load | {"placement_version": loop.engine.placement.version,
                                   "local_prefill_threshold": threshold}

    @app.get("/metrics")
    def metrics() -> Response:
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    @app.get("/healthz")
    def healthz() -> dict:
        return {"status": "ok"}

    return app
