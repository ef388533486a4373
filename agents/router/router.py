"""The router's state: the deployment's ranks (the bundled runtime's workers, or vLLM servers), their load polled,
each request routed to them (agents/router/policy.py) and generated across them, what it saw counted in its metrics
and windows. The OpenAI-compatible HTTP front over it is agents/router/app.py.

A long prompt on the bundled runtime goes prefill rank -> KV hand-off -> decode rank: `Router.generate`.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator

import httpx
from prometheus_client import CollectorRegistry

from agents.router import upstream_vllm
from agents.router.metrics import RouterMetrics
from agents.router.policy import Endpoint, Route, block_hashes, route
from agents.router.window import RouterWindows

WorkerError = upstream_vllm.UpstreamError  # a rank answered an error: its status and message


class Router:
    """windows: where this router's windows are summed (None: none are kept, no controller to tell). engine: what
    the ranks are: "moectl" (the bundled runtime's workers) or "vllm" (vLLM servers: agents/router/upstream_vllm.py)."""

    def __init__(self, endpoints: list[Endpoint], *, model: str, local_prefill_threshold: int,
                 registry: CollectorRegistry, poll_seconds: float = 0.5, windows: RouterWindows | None = None,
                 engine: str = "moectl"):
        self.endpoints, self.model, self.poll_seconds, self.engine = endpoints, model, poll_seconds, engine
        self.threshold = self.default_threshold = local_prefill_threshold
        self.metrics = RouterMetrics(registry)
        self.windows = windows
        self.client: httpx.AsyncClient | None = None  # requests to the worker ranks
        # load polls and window reports: their own connections, so a surge of streaming requests never leaves
        # them waiting for one (a rank that cannot be polled reads as unhealthy)
        self.control: httpx.AsyncClient | None = None

    def of_role(self, role: str) -> list[Endpoint]:
        return [e for e in self.endpoints if e.role == role]

    def route(self, token_ids: list[int]) -> Route:
        plan = route(token_ids, prefill=self.of_role("prefill"), decode=self.of_role("decode"),
                     unified=self.of_role("unified"), threshold=self.threshold)
        self.metrics.observe_route(plan, len(token_ids))
        if self.windows is not None:
            self.windows.arrived(plan.kind, len(token_ids))
        return plan

    def observe_tokens(self, plan: Route, num_before: int, num_new: int, since_start: float, since_last: float) -> None:
        self.metrics.observe_tokens(num_before, num_new, since_start, since_last)
        if self.windows is None:
            return
        if num_before == 0:
            self.windows.first_token(plan.kind, since_start)
        elif num_new:
            self.windows.tokens(since_last / num_new, num_new)

    def finish(self, finish_reason: str | None, num_tokens: int, seconds: float) -> None:
        """A request the router answered ends: finished, or failed (no finish reason)."""
        self.metrics.finish(finish_reason)
        if self.windows is not None:
            self.windows.finished(num_tokens, seconds, is_failed=finish_reason not in ("stop", "length"))

    async def poll(self) -> None:
        """Refreshes every rank's load and health."""
        while True:
            for endpoint in list(self.endpoints):  # the admin API may add or remove instances meanwhile
                try:
                    if self.engine == upstream_vllm.ENGINE:
                        response = await self.control.get(f"{endpoint.url}/metrics", timeout=2.0)
                        response.raise_for_status()
                        load = dict(zip(("num_running", "num_waiting", "kv_cache_usage"),
                                        upstream_vllm.load_of(response.text), strict=True))
                    else:
                        load = (await self.control.get(f"{endpoint.url}/v1/internal/load", timeout=2.0)).json()
                    endpoint.num_running, endpoint.num_waiting = load["num_running"], load["num_waiting"]
                    endpoint.kv_cache_usage = load["kv_cache_usage"]
                    endpoint.is_healthy = True
                except (httpx.HTTPError, ValueError, KeyError):
                    endpoint.is_healthy = False
            self.metrics.set_endpoints(self.endpoints)
            await asyncio.sleep(self.poll_seconds)

    async def generate(self, plan: Route, token_ids: list[int], body: dict
                       ) -> AsyncIterator[tuple[list[int], str | None]]:
        """Yields (new token ids, finish reason or None) as the worker ranks produce them. The prefill rank's
        part ends when its KV hand-off has arrived (it counts as in flight until then), the decode rank's at
        the last token: a draining instance is idle once both are done."""
        hashes = block_hashes(token_ids)
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
            try:
                response = await self.client.post(f"{plan.prefill.url}/v1/internal/prefill", json=body)
            finally:
                plan.prefill.num_in_flight -= 1
                ends.remove(plan.prefill)
            _raise_for_worker(response)
            if not response.headers["content-type"].startswith("application/octet-stream"):
                for line in response.text.splitlines():  # finished with its first token
                    item = json.loads(line)
                    yield item["token_ids"], item["finish_reason"] if item["finished"] else None
                return
            payload = response.content
            seconds = time.perf_counter() - started
            self.metrics.observe_transfer(len(payload), seconds)
            if self.windows is not None:
                self.windows.transferred(seconds)
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
