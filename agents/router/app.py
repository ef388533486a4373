"""The router's app: the OpenAI-compatible front of a deployment (`/v1/completions`,
`/v1/chat/completions`, streaming or not, `/v1/models`), routing each request to worker ranks.

Long prompts go prefill rank -> KV hand-off -> decode rank; short ones (fewer uncached tokens than the
PD-aware threshold) are prefilled by the decode rank itself. Its own metrics (`moectl_router_*`) are
the user's view: queue, TTFT, ITL, routed tokens, KV transferred.
"""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import json
import logging
import time
import uuid
from collections.abc import AsyncIterator

import httpx
from fastapi import FastAPI, HTTPException, Request, Response
from fastapi.responses import JSONResponse, StreamingResponse
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from agents.router.metrics import RouterMetrics
from agents.router.openai_api import ChatRequest, Completion, CompletionRequest, error_body
from agents.router.policy import Endpoint, Route, block_hashes, route
from agents.runtime.tokenizer import encode

log = logging.getLogger("moectl.router")
DEFAULT_MAX_TOKENS = 64


class WorkerError(Exception):
    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


class Router:
    def __init__(self, endpoints: list[Endpoint], *, model: str, local_prefill_threshold: int,
                 registry: CollectorRegistry, poll_seconds: float = 0.5):
        self.endpoints, self.model, self.poll_seconds = endpoints, model, poll_seconds
        self.threshold = local_prefill_threshold
        self.metrics = RouterMetrics(registry)
        self.client: httpx.AsyncClient | None = None

    def of_role(self, role: str) -> list[Endpoint]:
        return [e for e in self.endpoints if e.role == role]

    def route(self, token_ids: list[int]) -> Route:
        return route(token_ids, prefill=self.of_role("prefill"), decode=self.of_role("decode"),
                     unified=self.of_role("unified"), default_threshold=self.threshold)

    async def poll(self) -> None:
        """Refreshes every rank's load and health; the threshold rides along from the decode agents."""
        while True:
            for endpoint in self.endpoints:
                try:
                    response = await self.client.get(f"{endpoint.url}/v1/internal/load", timeout=2.0)
                    load = response.json()
                    endpoint.num_running, endpoint.num_waiting = load["num_running"], load["num_waiting"]
                    endpoint.kv_cache_usage = load["kv_cache_usage"]
                    endpoint.local_prefill_threshold = load.get("local_prefill_threshold")
                    endpoint.is_healthy = True
                except (httpx.HTTPError, ValueError, KeyError):
                    endpoint.is_healthy = False
            self.metrics.set_endpoints(self.endpoints)
            await asyncio.sleep(self.poll_seconds)

    async def generate(self, token_ids: list[int], body: dict) -> AsyncIterator[tuple[list[int], str | None]]:
        """Yields (new token ids, finish reason or None) as the worker ranks produce them."""
        plan = self.route(token_ids)
        hashes = block_hashes(token_ids)
        self.metrics.observe_route(plan, len(token_ids))
        ends = [e for e in (plan.prefill, plan.decode) if e is not None]
        for endpoint in ends:
            endpoint.num_in_flight += 1
            endpoint.remember(hashes)  # both ends cache the prompt's blocks after this request
        try:
            if plan.kind != "pd":
                async for item in self._stream(f"{plan.decode.url}/v1/internal/generate", json=body):
                    yield item
                return
            started = time.perf_counter()
            response = await self.client.post(f"{plan.prefill.url}/v1/internal/prefill", json=body)
            _raise_for_worker(response)
            if not response.headers["content-type"].startswith("application/octet-stream"):
                for line in response.text.splitlines():  # finished with its first token
                    item = json.loads(line)
                    yield item["token_ids"], item["finish_reason"] if item["finished"] else None
                return
            payload = response.content
            self.metrics.observe_transfer(len(payload), time.perf_counter() - started)
            header = json.loads(payload[: payload.index(b"\n")])
            yield header["token_ids"][-1:], None  # the first token, before the hand-off: that is the TTFT
            async for item in self._stream(f"{plan.decode.url}/v1/internal/decode", content=payload,
                                           headers={"Content-Type": "application/octet-stream"}):
                yield item
        finally:
            for endpoint in ends:
                endpoint.num_in_flight -= 1

    async def _stream(self, url: str, **kwargs) -> AsyncIterator[tuple[list[int], str | None]]:
        async with self.client.stream("POST", url, **kwargs) as response:
            if response.status_code != 200:
                await response.aread()
                _raise_for_worker(response)
            async for line in response.aiter_lines():
                if line:
                    item = json.loads(line)
                    if "error" in item:
                        raise WorkerError(500, item["error"])
                    yield item["token_ids"], item["finish_reason"] if item["finished"] else None


def _raise_for_worker(response: httpx.Response) -> None:
    if response.status_code != 200:
        try:
            detail = response.json().get("detail", response.text)
        except ValueError:
            detail = response.text
        raise WorkerError(response.status_code, str(detail))


async def texts(router: Router, request: CompletionRequest | ChatRequest, token_ids: list[int]
                ) -> AsyncIterator[tuple[str, str | None, int]]:
    """(text piece, finish reason, tokens so far): bytes decoded incrementally, stop strings honoured."""
    body = {"request_id": uuid.uuid4().hex, "prompt_token_ids": token_ids, "temperature": request.temperature,
            "max_tokens": request.num_max_tokens(DEFAULT_MAX_TOKENS)}
    decoder, text, num_tokens = codecs.getincrementaldecoder("utf-8")(errors="replace"), "", 0
    started = last = time.perf_counter()
    stops = request.stops
    async for new, finish_reason in router.generate(token_ids, body):
        now = time.perf_counter()
        router.metrics.observe_tokens(num_tokens, len(new), now - started, now - last)
        num_tokens, last = num_tokens + len(new), now
        piece = decoder.decode(bytes(new), final=finish_reason is not None)
        hit = next((s for s in stops if s in text + piece), None)
        if hit is not None:
            cut = (text + piece).index(hit)
            yield (text + piece)[len(text):cut], "stop", num_tokens
            return  # closing the stream tells the worker nothing; it stops at max_tokens
        text += piece
        yield piece, finish_reason, num_tokens
        if finish_reason is not None:
            return


def create_app(router: Router) -> FastAPI:
    @contextlib.asynccontextmanager
    async def lifespan(_app: FastAPI):
        router.client = httpx.AsyncClient(timeout=httpx.Timeout(300.0, connect=5.0))
        poller = asyncio.create_task(router.poll())
        yield
        poller.cancel()
        await router.client.aclose()

    app = FastAPI(title="moectl router", version="0.1.0", lifespan=lifespan)

    async def complete(request: CompletionRequest | ChatRequest, chat: bool) -> Response:
        try:
            token_ids = encode(request.text)
        except ValueError as exc:
            return JSONResponse(error_body(str(exc)), status_code=400)
        completion = Completion(request.model or router.model, chat)
        pieces = texts(router, request, token_ids)
        router.metrics.in_flight.inc()
        try:
            first = await anext(pieces)  # worker errors surface as HTTP errors before any byte is sent
        except (WorkerError, LookupError, httpx.HTTPError) as exc:
            router.metrics.in_flight.dec()
            router.metrics.requests.labels("failed").inc()
            status = exc.status if isinstance(exc, WorkerError) and exc.status < 500 else 503
            return JSONResponse(error_body(str(exc), "server_error" if status >= 500 else "invalid_request_error"),
                                status_code=status)
        if not request.stream:
            text, finish_reason, num_tokens = first
            try:
                async for item in pieces:
                    text, finish_reason, num_tokens = text + item[0], item[1], item[2]
            except (WorkerError, httpx.HTTPError) as exc:
                return JSONResponse(error_body(str(exc), "server_error"), status_code=503)
            finally:
                router.metrics.finish(finish_reason)
            return JSONResponse(completion.full(text, finish_reason or "length", len(token_ids), num_tokens))

        async def events():
            piece, finish_reason, _ = first
            is_first = True
            try:
                yield completion.chunk(piece, finish_reason, is_first=True)
                is_first = False
                async for piece, finish_reason, _ in pieces:
                    yield completion.chunk(piece, finish_reason)
            except (WorkerError, httpx.HTTPError) as exc:
                yield f"data: {json.dumps(error_body(str(exc), 'server_error'))}\n\n"
            finally:
                router.metrics.finish(finish_reason)
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
