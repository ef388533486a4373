"""Tells the controller the router's window, once per window, and applies its answer (the PD-aware
threshold, the window length). A controller that is down or refuses costs that window only: the router
keeps routing on what it was last told, and never waits for the controller to answer a client."""

from __future__ import annotations

import asyncio
import logging
import time

import httpx
from pydantic import ValidationError

from agents.protocol import RouterState, RouterWindow

log = logging.getLogger("moectl.router")
PATH = "/v1/agents/router-window"


class WindowReporter:
    """controller: its base URL; agent_token: a token with the agent role (it posts windows only)."""

    def __init__(self, router, controller: str, agent_token: str, *, tick_seconds: float = 0.2,
                 clock=time.time):
        self.router, self.clock, self.tick_seconds = router, clock, tick_seconds
        self.url = controller.rstrip("/") + PATH
        self.headers = {"Authorization": f"Bearer {agent_token}"}
        self.num_posted = self.num_failed = 0

    async def run(self) -> None:
        while True:
            closed = self.router.windows.roll(self.clock(), self.router.threshold)
            if closed is not None:
                await self.post(closed)
            await asyncio.sleep(self.tick_seconds)

    async def post(self, window: RouterWindow) -> None:
        try:
            response = await self.router.control.post(self.url, content=window.model_dump_json(), timeout=5.0,
                                                     headers=self.headers | {"Content-Type": "application/json"})
            if response.status_code != 200:
                self.num_failed += 1
                log.log(logging.INFO if response.status_code in (404, 503) else logging.WARNING,
                        "router window refused: %d %s", response.status_code, response.text[:300])
                return
            self.apply(RouterState.model_validate_json(response.content))
            self.num_posted += 1
        except (httpx.HTTPError, ValidationError) as exc:
            self.num_failed += 1
            log.info("could not report the window to the controller: %s", exc)

    def apply(self, state: RouterState) -> None:
        threshold = state.local_prefill_threshold
        threshold = self.router.default_threshold if threshold is None else threshold
        if threshold != self.router.threshold:
            log.info("local-prefill threshold %d -> %d tokens (the controller's)", self.router.threshold, threshold)
            self.router.threshold = threshold
        if state.window_seconds:
            self.router.windows.set_window_seconds(state.window_seconds, self.clock())
