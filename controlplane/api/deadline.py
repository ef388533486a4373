"""Request deadlines: a request that waited for a worker thread longer than the database timeout is
answered 503 + Retry-After before it touches the database. Its caller has likely given up (an agent waits
5 s), and doing its work late would only lengthen the queue behind it.

With the database's own waits bounded the same way (`store.db.make_engine`), a request that reaches the
database ends within about twice `db_timeout_seconds`: under the agents' timeout, so nothing is done for a
caller that already left, and no connection is held for it.
"""

from __future__ import annotations

import time

from fastapi import HTTPException, Request

from controlplane.api.errors import RETRY_AFTER

ARRIVED_AT = "moectl_arrived_at"


class StampArrival:
    """Pure ASGI middleware: notes when each request arrived, before it queues for a worker thread."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http":
            scope.setdefault("state", {})[ARRIVED_AT] = time.monotonic()
        await self.app(scope, receive, send)


def check(request: Request) -> None:
    arrived_at = request.scope.get("state", {}).get(ARRIVED_AT)
    waited = 0.0 if arrived_at is None else time.monotonic() - arrived_at
    if waited > request.app.state.settings.db_timeout_seconds:
        raise HTTPException(503, f"the controller is overloaded: this request waited {waited:.1f}s for a worker "
                                 f"and was not started; nothing was stored, retry",
                            headers={"Retry-After": RETRY_AFTER})
