"""The router's app: the OpenAI-compatible front of a deployment (`/v1/completions`,
`/v1/chat/completions`, streaming or not, `/v1/models`) over the router's ranks (agents/router/router.py): the
prompt encoded, the tokens decoded to text, stop strings honoured.

Long prompts go prefill rank -> KV hand-off -> decode rank; short ones (fewer uncached tokens than the
PD-aware threshold) are prefilled by the decode rank itself. Its own metrics (`moectl_router_*`) are
the user's view: queue, TTFT, ITL, routed tokens, KV transferred; the same, per window, go to the
controller (agents/router/report.py), whose answer sets the threshold. Instances come and go through the
admin API (agents/router/admin.py): a draining one gets no new requests and is removed once idle.
"""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import json
import time
import uuid
from collections.abc import AsyncIterator

import httpx
from fastapi import FastAPI, HTTPException, Request, Response
from fastapi.responses import JSONResponse, StreamingResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from agents.router import upstream_vllm
from agents.router.admin import admin_router
from agents.router.openai_api import ChatRequest, Completion, CompletionRequest, error_body
from agents.router.policy import Route, block_hashes
from agents.router.report import WindowReporter
from agents.router.router import Router, WorkerError
from agents.runtime.tokenizer import encode

DEFAULT_MAX_TOKENS = 64


async def texts(router: Router, request: CompletionRequest | ChatRequest, token_ids: list[int]
                ) -> AsyncIterator[tuple[str, str | None, int]]:
    """(text piece, finish reason, tokens so far): bytes decoded incrementally, stop strings honoured."""
    body = {"request_id": uuid.uuid4().hex, "prompt_token_ids": token_ids, "temperature": request.temperature,
            "max_tokens": request.num_max_tokens(DEFAULT_MAX_TOKENS)}
    text, num_tokens = "", 0
    started = last = time.perf_counter()
    stops = request.stops
    plan = router.route(token_ids)
    async for piece, num_new, finish_reason in _pieces(router, plan, token_ids, body):
        now = time.perf_counter()
        router.observe_tokens(plan, num_tokens, num_new, now - started, now - last)
        num_tokens, last = num_tokens + num_new, now
        hit = next((s for s in stops if s in text + piece), None)
        if hit is not None:
            cut = (text + piece).index(hit)
            yield (text + piece)[len(text):cut], "stop", num_tokens
            return  # closing the stream tells the worker nothing; it stops at max_tokens
        text += piece
        yield piece, finish_reason, num_tokens
        if finish_reason is not None:
            return


async def _pieces(router: Router, plan: Route, token_ids: list[int], body: dict
                  ) -> AsyncIterator[tuple[str, int, str | None]]:
    """(text piece, its number of tokens, finish reason or None) from the ranks `plan` chose."""
    if router.engine == upstream_vllm.ENGINE:
        endpoint = plan.decode  # a unified vLLM server: in flight there until its last token
        endpoint.num_in_flight += 1
        endpoint.remember(block_hashes(token_ids))
        try:
            async for item in upstream_vllm.stream(router.client, endpoint.url, router.model, token_ids, body):
                yield item
        finally:
            endpoint.num_in_flight -= 1
        return
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    async for new, finish_reason in router.generate(plan, token_ids, body):
        yield decoder.decode(bytes(new), final=finish_reason is not None), len(new), finish_reason


def create_app(router: Router, *, admin_token: str = "", reporter: WindowReporter | None = None) -> FastAPI:
    """admin_token: opens the admin API (agents/router/admin.py); reporter: posts the router's windows to
    the controller (needs `router.windows`)."""

    @contextlib.asynccontextmanager
    async def lifespan(_app: FastAPI):
        # no cap on connections: requests in flight are bounded by the clients, and a capped pool makes the
        # ones over it wait for a connection as if the ranks were slow
        router.client = httpx.AsyncClient(timeout=httpx.Timeout(300.0, connect=5.0),
                                          limits=httpx.Limits(max_connections=None, max_keepalive_connections=64))
        router.control = httpx.AsyncClient(timeout=5.0)
        tasks = [asyncio.create_task(router.poll())]
        if reporter is not None:
            tasks.append(asyncio.create_task(reporter.run()))
        yield
        for task in tasks:
            task.cancel()
        await router.client.aclose()
        await router.control.aclose()

    app = FastAPI(title="moectl router", version="0.1.0", lifespan=lifespan)
    app.include_router(admin_router(router.endpoints, admin_token))

    async def complete(request: CompletionRequest | ChatRequest, chat: bool) -> Response:
        try:
            token_ids = encode(request.text)
        except ValueError as exc:
            return JSONResponse(error_body(str(exc)), status_code=400)
        completion = Completion(request.model or router.model, chat)
        pieces = texts(router, request, token_ids)
        router.metrics.in_flight.inc()
        started = time.perf_counter()
        try:
            first = await anext(pieces)  # worker errors surface as HTTP errors before any byte is sent
        except (WorkerError, LookupError, httpx.HTTPError) as exc:
            router.finish(None, 0, time.perf_counter() - started)
            status = exc.status if isinstance(exc, WorkerError) and exc.status < 500 else 503
            return JSONResponse(error_body(str(exc), "server_error" if status >= 500 else "invalid_request_error"),
                                status_code=status)
        if not request.stream:
            text, finish_reason, num_tokens = first
            try:
                async for item in pieces:
                    text, finish_reason, num_tokens = text + item[0], item[1], item[2]
            except (WorkerError, httpx.HTTPError) as exc:
                finish_reason = None
                return JSONResponse(error_body(str(exc), "server_error"), status_code=503)
            finally:
                router.finish(finish_reason, num_tokens, time.perf_counter() - started)
            return JSONResponse(completion.full(text, finish_reason or "length", len(token_ids), num_tokens))

        async def events():
            piece, finish_reason, num_tokens = first
            is_first = True
            try:
                yield completion.chunk(piece, finish_reason, is_first=True)
                is_first = False
                async for piece, finish_reason, count in pieces:
                    num_tokens = count
                    yield completion.chunk(piece, finish_reason)
            except (WorkerError, httpx.HTTPError) as exc:
                finish_reason = None
                yield f"data: {json.dumps(error_body(str(exc), 'server_error'))}\n\n"
            finally:
                router.finish(finish_reason, num_tokens, time.perf_counter() - started)
            if is_first is False:
                yield "data: [DONE]\n\n"

        return StreamingResponse(events(), media_type="text/event-stream")

    @app.post("/v1/completions")
    async def completions(request: CompletionRequest) -> Response:
        return await complete(request, chat=False)

    @app.post("/v1/chat/completions")
    async def chat_completions(request: ChatRequest) -> Response:
        return await complete(request, chat=True)

    @app.get("/v1/models")
    def models() -> dict:
        return {"object": "list", "data": [{"id": router.model, "object": "model", "created": 0,
                                            "owned_by": "moectl"}]}

    @app.get("/metrics")
    def metrics() -> Response:
        return Response(generate_latest(router.metrics.registry), media_type=CONTENT_TYPE_LATEST)

    @app.get("/healthz")
    def healthz() -> dict:
        healthy = sum(e.is_healthy for e in router.endpoints)
        return {"status": "ok" if healthy else "degraded", "endpoints": len(router.endpoints), "healthy": healthy}

    @app.exception_handler(HTTPException)
    async def _error(_request: Request, exc: HTTPException) -> JSONResponse:
        return JSONResponse(error_body(str(exc.detail)), status_code=exc.status_code)

    return app
