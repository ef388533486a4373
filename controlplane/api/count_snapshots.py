"""Counts the agents' snapshot posts by answer status (`moectl_controller_snapshots_total`), 422s aside: the
validation handler counts those (controlplane/api/app.py).

Pure ASGI, not `@app.middleware("http")`: Starlette's BaseHTTPMiddleware re-streams every response, and under load
it cut the dashboard's static files short of their Content-Length (h11 refused the end of the message and the
browser's page load never finished)."""

from __future__ import annotations

from controlplane.loop.telemetry import ControllerMetrics


class CountSnapshots:
    def __init__(self, app, *, metrics: ControllerMetrics):
        self.app, self.metrics = app, metrics

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or not scope["path"].endswith("/snapshot"):
            return await self.app(scope, receive, send)

        async def counted(message):
            if message["type"] == "http.response.start" and message["status"] != 422:
                self.metrics.snapshots.labels(str(message["status"])).inc()
            await send(message)

        await self.app(scope, receive, counted)
