"""The OpenAI-compatible HTTP API of ``bitnet serve`` (FastAPI + uvicorn).

Endpoints (``server/routes.py``): ``/v1/completions``, ``/v1/chat/completions``
(both with ``stream: true`` as server-sent events), ``/v1/embeddings``
(``embeddings.py``), ``/v1/models``, ``/health``,
``/metrics`` (Prometheus text), ``/`` (a minimal chat page). Every error is
an OpenAI-style body with a 4xx status; generation runs on the scheduler's
worker thread, never on the event loop (``server/service.py``).
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import AsyncIterator
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from .._version import __version__
from .auth import ApiKeyAuth
from .embeddings import register as register_embeddings
from .limits import BodyLimit
from .options import ServerOptions
from .routes import add_routes
from .schemas import error_body
from .service import APIError, Service

__all__ = ["APIError", "create_app"]


def create_app(
    model: Any,
    model_name: str,
    options: ServerOptions | None = None,
    *,
    default_max_tokens: int | None = None,
    **fields: Any,
) -> FastAPI:
    """An app serving ``model`` under the name ``model_name``, with ``options``
    (``server/options.py``; ``fields`` replace some of them, ``default_max_tokens``
    is ``max_tokens``).

    ``max_body_bytes`` caps a request body (413 beyond it); a request's
    ``max_tokens`` is bounded by what the context leaves after its prompt;
    ``step_tokens`` is the scheduler's token budget per batched step
    (``server/scheduler.py``); ``prefix_cache`` reuses the KV of prompt prefixes
    computed before (``model/prefix_cache.py``).
    """
    if default_max_tokens is not None:
        fields["max_tokens"] = default_max_tokens
    opts = dataclasses.replace(options or ServerOptions(), **fields)
    svc = Service(model, model_name, opts)

    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        yield
        svc.close()
        close_embeddings()

    app = FastAPI(
        title="bitnet", version=__version__, docs_url=None, redoc_url=None, lifespan=lifespan
    )
    app.state.scheduler = svc.scheduler
    app.state.service = svc
    app.add_middleware(BodyLimit, max_bytes=opts.max_body_bytes)
    app.add_middleware(ApiKeyAuth, api_key=opts.api_key)  # outermost: before the body is read

    # --- errors: always the OpenAI body, never a 500 for bad input -------------------
    @app.exception_handler(APIError)
    async def _api_error(_: Request, exc: APIError) -> JSONResponse:
        return JSONResponse(exc.body, status_code=exc.status)

    @app.exception_handler(RequestValidationError)
    async def _validation(_: Request, exc: RequestValidationError) -> JSONResponse:
        first = exc.errors()[0] if exc.errors() else {}
        loc = ".".join(str(p) for p in first.get("loc", ()) if p != "body")
        msg = first.get("msg", "invalid request")
        return JSONResponse(
            error_body(f"{loc}: {msg}" if loc else msg, param=loc or None), status_code=400
        )

    @app.exception_handler(StarletteHTTPException)
    async def _http(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        return JSONResponse(
            error_body(str(exc.detail), code=str(exc.status_code)),
            status_code=exc.status_code,
            headers=exc.headers,  # a 405's Allow
        )

    # /v1/embeddings, and 400s on the generation routes for an embedding model (first:
    # the first route that matches answers)
    close_embeddings = register_embeddings(app, svc.model, model_name)
    add_routes(app, svc)
    return app
