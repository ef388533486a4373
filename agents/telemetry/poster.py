"""Posts closed windows to the controller from a background thread; the engine never waits on it.

The queue is bounded: when the controller is slow or down, the oldest windows are dropped (and
counted), never the step loop blocked. Failures back off exponentially with full jitter, so a
fleet of agents does not hammer a controller that comes back. Every accepted post returns a
`DesiredState`, handed to `on_answer` (called on this thread; the agent applies it on its own).
A rank's `Snapshot` goes to `/v1/agents/snapshot`, an EP group's `GroupSnapshot` (moectl.v2, posted by the
group's rank 0) to `/v2/agents/snapshot`. A window goes out a random moment into the next window's first tenth
(agents/protocol/grid.py `post_at`), not the instant it closes, when the whole fleet's windows close.

A controller whose database was restored or replaced does not know the placement version the rank (a group:
its newest rank) runs, and refuses it (409, code PLACEMENT_UNKNOWN). The poster then sends the same window
again with the table it runs (`running_placement`), which the controller adopts. So nobody restarts ranks
by hand.
"""

from __future__ import annotations

import logging
import queue
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import httpx
from pydantic import ValidationError

from agents.protocol import (
    PLACEMENT_UNKNOWN,
    DesiredState,
    GroupSnapshot,
    ModelShape,
    RunningPlacement,
    Snapshot,
    error_code,
)
from agents.protocol.grid import POST_SPREAD_WINDOWS, post_at

log = logging.getLogger("moectl.agent")

RETRY_STATUSES = {404, 429, 500, 502, 503, 504}  # 404: the deployment may be registered any moment


@dataclass(frozen=True)
class ControllerLink:
    """How a poster reaches the controller and waits out a slow or absent one. Its URL and the agents' token, the
    windows it queues (the oldest dropped beyond), each post's timeout and the backoff's bounds (seconds, full
    jitter). `transport`: httpx's (None: the network)."""

    url: str
    agent_token: str
    max_queue: int = 8
    timeout: float = 5.0
    min_backoff: float = 0.5
    max_backoff: float = 30.0
    transport: httpx.BaseTransport | None = None


@dataclass(frozen=True)
class Registration:
    """What registers the deployment when the controller does not know it (a post answered 404): an operator's
    token, the model's shape, more policy fields, and the engine (sglang, vllm: an adapter's poster; None: the
    controller's default)."""

    api_token: str
    model: ModelShape
    policy: dict | None = None
    engine: str | None = None


class SnapshotPoster:
    def __init__(self, link: ControllerLink, *, on_answer: Callable[[DesiredState], None],
                 on_failure: Callable[[str], None], registration: Registration | None = None,
                 running_placement: Callable[[int], RunningPlacement | None] | None = None,
                 clock: Callable[[], float] = time.time, rng: random.Random | None = None):
        """registration: None, or one without a token: a 404 is retried, the deployment may be registered any
        moment. running_placement(version): the table the rank runs if it runs `version`, else None. clock: the
        agent's (unix seconds), against which its windows end; rng draws the post's moment and the backoff."""
        self.link, self.clock, self.rng = link, clock, rng or random.Random()
        self.on_answer, self.on_failure = on_answer, on_failure
        self.running_placement = running_placement
        self.registration = registration if registration is not None and registration.api_token else None
        self.queue: queue.Queue[Snapshot | GroupSnapshot] = queue.Queue(maxsize=link.max_queue)
        self.client = httpx.Client(base_url=link.url, timeout=link.timeout, transport=link.transport,
                                   headers={"Authorization": f"Bearer {link.agent_token}"})
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._run, name="snapshot-poster", daemon=True)
        self.num_posted = 0

    def start(self) -> SnapshotPoster:
        self.thread.start()
        return self

    def stop(self, timeout: float = 5.0) -> None:
        self.stopping.set()
        self.thread.join(timeout)
        self.client.close()

    def submit(self, snapshot: Snapshot | GroupSnapshot) -> None:
        """Never blocks: a full queue loses its oldest window."""
        while True:
            try:
                self.queue.put_nowait(snapshot)
                return
            except queue.Full:
                try:
                    self.queue.get_nowait()
                    self.on_failure("queue_full")
                except queue.Empty:
                    pass

    def _run(self) -> None:
        num_failures = 0
        while not self.stopping.is_set():
            try:
                snapshot = self.queue.get(timeout=0.2)
            except queue.Empty:
                continue
            body = snapshot.model_dump_json()  # before the wait: the post leaves at its moment, retries reuse it
            self._wait_for_turn(snapshot)
            while not self.stopping.is_set():
                reason = self._post(snapshot, body)
                if reason is None:
                    num_failures = 0
                    break
                self.on_failure(reason)
                if reason == "http_4xx":  # the controller refused this window: retrying cannot help
                    break
                num_failures += 1
                # full jitter: a uniform wait up to the exponential cap
                cap = min(self.link.max_backoff, self.link.min_backoff * 2 ** min(num_failures, 16))
                self.stopping.wait(self.rng.uniform(0.5 * self.link.min_backoff, cap))

    def _wait_for_turn(self, snapshot: Snapshot | GroupSnapshot) -> None:
        """Waits for the moment `post_at` draws for this window; never longer than the spread itself (a window
        that closed late, or a clock the controller does not share, costs no more than that)."""
        spread = POST_SPREAD_WINDOWS * snapshot.window_seconds
        at = post_at(snapshot.window_start + snapshot.window_seconds, snapshot.window_seconds, self.rng.random())
        self.stopping.wait(min(max(0.0, at - self.clock()), spread))

    def _post(self, snapshot: Snapshot | GroupSnapshot, body: str) -> str | None:
        """One attempt of `snapshot`, encoded as `body`; returns None on success, else a failure reason (a bounded
        enum)."""
        is_group = isinstance(snapshot, GroupSnapshot)
        try:
            response = self.client.post("/v2/agents/snapshot" if is_group else "/v1/agents/snapshot",
                                        content=body,
                                        headers={"Content-Type": "application/json"})
        except httpx.TimeoutException:
            return "timeout"
        except httpx.HTTPError as exc:
            log.debug("controller unreachable: %s", exc)
            return "connect"
        if response.status_code == 404 and self.registration is not None:
            self._register(snapshot.deployment if is_group else snapshot.identity.deployment)
        is_unknown = response.status_code == 409 and error_code(response.content) == PLACEMENT_UNKNOWN
        if is_unknown and self.running_placement is not None and snapshot.running_placement is None:
            table = self.running_placement(snapshot.placement_version)
            if table is not None:
                log.warning("the controller never issued placement v%d (database restored or replaced?): "
                            "sending the table this rank runs for it to adopt", snapshot.placement_version)
                self.on_failure("placement_unknown")
                adopted = snapshot.model_copy(update={"running_placement": table})
                return self._post(adopted, adopted.model_dump_json())
        if response.status_code != 200:
            level = logging.WARNING if response.status_code not in RETRY_STATUSES else logging.INFO
            log.log(level, "snapshot refused: %d %s", response.status_code, response.text[:300])
            if response.status_code in RETRY_STATUSES:
                return "http_5xx" if response.status_code >= 500 else "http_retry"
            return "http_4xx"
        try:
            answer = DesiredState.model_validate_json(response.content)
        except ValidationError as exc:
            log.warning("controller answered something that is not a DesiredState: %s", exc)
            return "invalid_answer"
        self.num_posted += 1
        self.on_answer(answer)
        return None

    def _register(self, deployment: str) -> None:
        it = self.registration
        body = {"model": it.model.model_dump()} | ({"policy": it.policy} if it.policy else {}) | \
            ({"engine": it.engine} if it.engine else {})
        try:
            response = self.client.put(f"/v1/deployments/{deployment}", json=body,
                                       headers={"Authorization": f"Bearer {it.api_token}"})
            log.info("registered deployment %s: %d", deployment, response.status_code)
        except httpx.HTTPError as exc:
            log.info("could not register deployment %s: %s", deployment, exc)
