"""The OpenAI-compatible HTTP API of ``bitnet serve`` (FastAPI + uvicorn).

Endpoints: ``/v1/completions``, ``/v1/chat/completions`` (both with
``stream: true`` as server-sent events), ``/v1/models``, ``/health``,
``/metrics`` (Prometheus text), ``/`` (a minimal chat page). Every error is
an OpenAI-style body with a 4xx status; generation runs on the scheduler's
worker thread, never on the event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import time
import uuid
from collections.abc import AsyncIterator
from importlib import resources
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse, PlainTextResponse, StreamingResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from .._version import __version__
from ..errors import BitnetError, ConfigError, ContextLengthError
from .metrics import render_metrics
from .scheduler import DONE, Job, QueueFullError, Scheduler
from .schemas import ChatRequest, CompletionRequest, _Sampling, error_body


class APIError(Exception):
    def __init__(
        self,
        status: int,
        message: str,
        type_: str = "invalid_request_error",
        param: str | None = None,
        code: str | None = None,
    ) -> None:
        super().__init__(message)
        self.status, self.body = status, error_body(message, type_, param, code)


def create_app(
    model: Any,
    model_name: str,
    *,
    api_key: str | None = None,
    max_active: int = 8,
    max_queue: int = 256,
    default_max_tokens: int = 256,
    step_tokens: int | None = None,
) -> FastAPI:
    """An app serving ``model`` under the name ``model_name`` (``step_tokens``: the
    scheduler's token budget per batched step, see ``server/scheduler.py``)."""
    scheduler = Scheduler(
        model, max_active=max_active, max_queue=max_queue, step_tokens=step_tokens
    )

    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        yield
        scheduler.close()

    app = FastAPI(
        title="bitnet", version=__version__, docs_url=None, redoc_url=None, lifespan=lifespan
    )
    app.state.scheduler = scheduler
    started = time.time()
    context = model.config.context_length

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
            error_body(str(exc.detail), code=str(exc.status_code)), status_code=exc.status_code
        )

    @app.middleware("http")
    async def _auth(request: Request, call_next):
        if api_key and request.url.path.startswith("/v1/"):
            given = request.headers.get("authorization", "")
            token = given[7:] if given.lower().startswith("bearer ") else ""
            if not hmac.compare_digest(token.encode(), api_key.encode()):
                return JSONResponse(
                    error_body(
                        "invalid or missing API key", "authentication_error", code="invalid_api_key"
                    ),
                    status_code=401,
                )
        return await call_next(request)

    # --- helpers --------------------------------------------------------------------
    def check_model(req: _Sampling) -> None:
        if req.model not in (None, "", model_name):
            raise APIError(
                404,
                f"the model {req.model!r} does not exist; this server has {model_name!r}",
                param="model",
                code="model_not_found",
            )
        missing = req.unsupported()
        if missing:
            raise APIError(
                400, f"{missing} is not supported by this server", param=missing.split()[0]
            )

    def submit(prompt_ids: list[int], req: _Sampling) -> Job:
        if len(prompt_ids) >= context:
            raise APIError(
                400,
                f"the prompt has {len(prompt_ids)} tokens; this model's context is {context}",
                param="prompt",
                code="context_length_exceeded",
            )
        try:
            params = req.sampling(default_max_tokens)
        except ConfigError as exc:
            raise APIError(400, str(exc)) from exc
        try:
            return scheduler.submit(prompt_ids, params)
        except QueueFullError as exc:
            raise APIError(429, str(exc), "rate_limit_error", code="queue_full") from exc

    def encode(text: str) -> list[int]:
        try:
            return model.encode(text, add_bos=True)
        except BitnetError as exc:
            raise APIError(400, str(exc), param="prompt") from exc

    async def pieces(job: Job, request: Request) -> AsyncIterator[str]:
        """Text pieces of a job; cancels it when the client disconnects."""
        try:
            while True:
                try:
                    item = await asyncio.wait_for(job.out.get(), timeout=1.0)
                except asyncio.TimeoutError:
                    if await request.is_disconnected():
                        job.cancel()
                        return
                    continue
                if item is DONE:
                    break
                yield item
        finally:
            job.cancel()  # a no-op when already finished; frees the sequence when not
        if job.error is not None:
            status = 400 if isinstance(job.error, (ContextLengthError, ConfigError)) else 500
            raise APIError(
                status,
                f"generation failed: {job.error}",
                "server_error" if status == 500 else "invalid_request_error",
            )

    def usage(job: Job) -> dict:
        p, c = job.stats.prompt_tokens or len(job.prompt_ids), job.stats.generated_tokens
        return {"prompt_tokens": p, "completion_tokens": c, "total_tokens": p + c}

    def finish_reason(job: Job) -> str:
        return "stop" if job.stats.finish_reason == "stop" else "length"

    def sse(obj: Any) -> str:
        return f"data: {json.dumps(obj, ensure_ascii=False)}\n\n"

    # --- endpoints ------------------------------------------------------------------
    @app.post("/v1/completions")
    async def completions(req: CompletionRequest, request: Request) -> Any:
        check_model(req)
        ids = encode(req.prompt) if isinstance(req.prompt, str) else [int(t) for t in req.prompt]
        if any(t < 0 or t >= model.config.vocab_size for t in ids):
            raise APIError(400, "token id out of the vocabulary", param="prompt")
        job = submit(ids, req)
        cid, created = f"cmpl-{uuid.uuid4().hex}", int(time.time())

        def chunk(text: str, finish: str | None) -> dict:
            return {
                "id": cid,
                "object": "text_completion",
                "created": created,
                "model": model_name,
                "choices": [{"index": 0, "text": text, "logprobs": None, "finish_reason": finish}],
            }

        if req.stream:

            async def events() -> AsyncIterator[str]:
                try:
                    async for piece in pieces(job, request):
                        yield sse(chunk(piece, None))
                except APIError as exc:
                    yield sse(exc.body)
                    return
                final = chunk("", finish_reason(job))
                final["usage"] = usage(job)
                yield sse(final)
                yield "data: [DONE]\n\n"

            return StreamingResponse(events(), media_type="text/event-stream")
        text = "".join([p async for p in pieces(job, request)])
        body = chunk(text, finish_reason(job))
        body["usage"] = usage(job)
        return body

    @app.post("/v1/chat/completions")
    async def chat(req: ChatRequest, request: Request) -> Any:
        check_model(req)
        try:
            messages = [{"role": m.role, "content": m.text()} for m in req.messages]
            prompt = model.chat_prompt(messages, add_generation_prompt=True)
        except (ValueError, BitnetError) as exc:
            raise APIError(400, str(exc), param="messages") from exc
        job = submit(encode(prompt), req)
        cid, created = f"chatcmpl-{uuid.uuid4().hex}", int(time.time())

        def chunk(delta: dict, finish: str | None) -> dict:
            return {
                "id": cid,
                "object": "chat.completion.chunk",
                "created": created,
                "model": model_name,
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
            }

        if req.stream:

            async def events() -> AsyncIterator[str]:
                yield sse(chunk({"role": "assistant", "content": ""}, None))
                try:
                    async for piece in pieces(job, request):
                        yield sse(chunk({"content": piece}, None))
                except APIError as exc:
                    yield sse(exc.body)
                    return
                final = chunk({}, finish_reason(job))
                final["usage"] = usage(job)
                yield sse(final)
                yield "data: [DONE]\n\n"

            return StreamingResponse(events(), media_type="text/event-stream")
        text = "".join([p async for p in pieces(job, request)])
        return {
            "id": cid,
            "object": "chat.completion",
            "created": created,
            "model": model_name,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": text},
                    "finish_reason": finish_reason(job),
                }
            ],
            "usage": usage(job),
        }

    @app.get("/v1/models")
    async def models() -> dict:
        return {
            "object": "list",
            "data": [
                {"id": model_name, "object": "model", "created": int(started), "owned_by": "bitnet"}
            ],
        }

    @app.get("/health")
    async def health() -> dict:
        sel = model.selection
        return {
            "status": "ok",
            "model": model_name,
            "provider": getattr(model.provider, "name", "?"),
            "summary": str(sel) if sel else None,
            "queue_depth": scheduler.queue_depth,
            "active": scheduler.active,
            "uptime_s": round(time.time() - started, 3),
            "version": __version__,
        }

    @app.get("/metrics")
    async def metrics() -> PlainTextResponse:
        return PlainTextResponse(
            render_metrics(model, scheduler, started), media_type="text/plain; version=0.0.4"
        )

    @app.get("/")
    async def index() -> HTMLResponse:
        page = resources.files("bitnet_core.server").joinpath("static/index.html").read_text()
        return HTMLResponse(page.replace("{{MODEL}}", model_name))

    return app
