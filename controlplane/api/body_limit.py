"""Refuses request bodies over a size limit before they are read into memory (413)."""

from __future__ import annotations

import json


class BodyLimit:
    """Pure ASGI middleware: checks Content-Length, and counts chunked bodies as they stream.

    A chunked body is refused from inside `receive`: the 413 is sent right there and the app is told the
    client left. Whatever the app answers to that (FastAPI: a 400 for a body it could not read) is
    dropped, so the caller sees the 413.
    """

    def __init__(self, app, max_bytes: int):
        self.app, self.max_bytes = app, max_bytes

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        headers = dict(scope.get("headers") or [])
        length = headers.get(b"content-length")
        if length is not None and length.isdigit() and int(length) > self.max_bytes:
            return await self._refuse(send)
        received, is_refused = 0, False

        async def limited_receive():
            nonlocal received, is_refused
            if is_refused:
                return {"type": "http.disconnect"}
            message = await receive()
            received += len(message.get("body", b""))
            if received > self.max_bytes:
                is_refused = True
                await self._refuse(send)
                return {"type": "http.disconnect"}
            return message

        async def guarded_send(message):
            if not is_refused:  # the 413 is the answer
                await send(message)

        await self.app(scope, limited_receive, guarded_send)

    async def _refuse(self, send) -> None:
        body = json.dumps({"detail": f"request body exceeds {self.max_bytes} bytes "
                                     f"(MOECTL_MAX_BODY_BYTES)"}).encode()
        await send({"type": "http.response.start", "status": 413,
                    "headers": [(b"content-type", b"application/json"),
                                (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})
