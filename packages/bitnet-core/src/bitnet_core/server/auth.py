"""The API key check, and the arrival time every request is stamped with.

A plain ASGI middleware rather than ``@app.middleware("http")``: Starlette's
``BaseHTTPMiddleware`` passes every chunk of a streamed response through an
extra task and memory stream, which cost a streamed token 0.2-0.3 ms of the event
loop's time (docs/SERVER.md).
"""

from __future__ import annotations

import hmac
import time
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse

from .schemas import error_body


class ApiKeyAuth:
    """Stamps ``request.state.arrived`` (time to first token counts from it) and, with
    ``api_key``, answers a ``/v1/`` request without ``Authorization: Bearer <key>`` 401."""

    def __init__(self, app: Any, api_key: str | None) -> None:
        self.app, self.api_key = app, api_key

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            scope.setdefault("state", {})["arrived"] = time.perf_counter()
            if self.api_key and not self._allowed(Request(scope)):
                body = error_body(
                    "invalid or missing API key", "authentication_error", code="invalid_api_key"
                )
                await JSONResponse(body, status_code=401)(scope, receive, send)
                return
        await self.app(scope, receive, send)

    def _allowed(self, request: Request) -> bool:
        if not request.url.path.startswith("/v1/"):
            return True
        given = request.headers.get("authorization", "")
        token = given[7:] if given.lower().startswith("bearer ") else ""
        return hmac.compare_digest(token.encode(), str(self.api_key).encode())
