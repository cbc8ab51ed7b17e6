"""A cap on request bodies, enforced while they arrive (HTTP 413).

A declared ``Content-Length`` over the cap is answered at once, before any of
the body is read; a chunked body is counted as it streams in and refused as
soon as it passes the cap, so an oversized request never sits in memory whole.
"""

from __future__ import annotations

import json
from typing import Any

from starlette.exceptions import HTTPException

from .schemas import error_body


def _too_large(limit: int) -> str:
    return f"the request body is larger than this server's limit of {limit} bytes"


class BodyLimit:
    """ASGI middleware: bodies over ``max_bytes`` get 413 with the OpenAI error body."""

    def __init__(self, app: Any, max_bytes: int) -> None:
        self.app, self.max_bytes = app, max_bytes

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers") or ()).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_bytes:
            await self._refuse(send)
            return
        seen = 0

        async def counted() -> dict:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_bytes:
                    # FastAPI passes an HTTPException from body reading through to its handler
                    raise HTTPException(413, _too_large(self.max_bytes))
            return message

        await self.app(scope, counted, send)

    async def _refuse(self, send: Any) -> None:
        body = json.dumps(
            error_body(_too_large(self.max_bytes), param=None, code="request_too_large")
        ).encode()
        await send(
            {
                "type": "http.response.start",
                "status": 413,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                    (b"connection", b"close"),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})
