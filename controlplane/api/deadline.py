"""Request deadlines: when more requests are in flight than there are worker threads (overload), one that
waited longer than the database timeout before its first transaction is answered 503 + Retry-After
instead of starting. Its caller has likely given up (an agent waits 5 s), and doing its work late would
only lengthen the queue behind it. A lone slow request (a busy machine) is never refused.

The database's own waits are bounded the same way (`store.db.make_engine`). So a request that reaches the
database ends within about twice `db_timeout_seconds`, under the agents' timeout: nothing is done for a
caller that already left, and no connection is held for it.
"""

from __future__ import annotations

import time
from contextvars import ContextVar

from controlplane.store.db import API_WORKER_THREADS


class Overloaded(Exception):
    """Refused before its first database statement: nothing was done."""


class Arrivals:
    """The requests in flight, and when the current one arrived (a context variable: a request's worker
    threads copy its context; the list in it is shared, so the first transaction can take it). Counted on
    the event loop's one thread, so without a lock."""

    def __init__(self, *, max_wait_seconds: float):
        self.max_wait_seconds, self.num_in_flight = max_wait_seconds, 0
        self.arrived_at: ContextVar[list[float] | None] = ContextVar("moectl_arrived_at", default=None)

    def refuse_if_late(self, *_) -> None:
        """A session's `after_begin` hook: raises Overloaded before a request's first transaction starts
        (its later ones, once it has started its work, are not refused)."""
        stamp = self.arrived_at.get()
        if not stamp:  # not a request (the loop, a test), or one already started
            return
        waited = time.monotonic() - stamp.pop()
        if waited > self.max_wait_seconds and self.num_in_flight > API_WORKER_THREADS:
            raise Overloaded(f"the controller is overloaded: this request waited {waited:.1f}s for a worker and "
                             f"was not started; nothing was stored, retry")


class StampArrival:
    """Pure ASGI middleware, outermost: stamps each request's arrival, before it queues for a worker."""

    def __init__(self, app, *, arrivals: Arrivals):
        self.app, self.arrivals = app, arrivals

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        self.arrivals.arrived_at.set([time.monotonic()])
        self.arrivals.num_in_flight += 1
        try:
            await self.app(scope, receive, send)
        finally:
            self.arrivals.num_in_flight -= 1
