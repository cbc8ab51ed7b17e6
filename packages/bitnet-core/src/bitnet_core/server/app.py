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
import json
import threading
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
from ..model.processors import LogprobRecorder
from .auth import ApiKeyAuth
from .limits import BodyLimit
from .logprobs import chat_logprobs, completion_logprobs
from .metrics import Latencies, render_metrics
from .scheduler import DONE, Job, QueueFullError, Scheduler
from .schemas import ChatRequest, CompletionRequest, _Sampling, error_body, error_responses


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
    max_body_bytes: int = 8 << 20,
    step_tokens: int | None = None,
) -> FastAPI:
    """An app serving ``model`` under the name ``model_name``.

    ``max_body_bytes`` caps a request body (413 beyond it); a request's
    ``max_tokens`` is bounded by what the context leaves after its prompt;
    ``step_tokens`` is the scheduler's token budget per batched step
    (``server/scheduler.py``).
    """
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
    latencies = Latencies()
    app.add_middleware(BodyLimit, max_bytes=max_body_bytes)
    app.add_middleware(ApiKeyAuth, api_key=api_key)  # outermost: before the body is read
    started = time.time()
    kv = getattr(getattr(model, "runner", None), "kv", None)
    context = int(getattr(kv, "max_seq_len", 0) or model.config.context_length)

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

    guidance: list = []  # the model's llguidance tokenizer, built on first use
    guidance_lock = threading.Lock()

    def make_constraint(schema: dict | None) -> Any:
        from ..model.structured import JsonConstraint, guidance_tokenizer, json_grammar

        if model.tokenizer is None:
            raise ConfigError("this model file has no tokenizer: no structured output")
        grammar = json_grammar(schema)
        with guidance_lock:
            if not guidance:
                vocab = model.config.vocab_size
                guidance.append(guidance_tokenizer(model.tokenizer, vocab, model.eos_ids))
        return JsonConstraint(guidance[0], grammar)

    async def processors_for(req: _Sampling) -> tuple[tuple, LogprobRecorder | None]:
        """The job's per-sequence processors: the JSON constraint, the logprob recorder."""
        procs: list = []
        constrained, schema = req.json_schema()
        if constrained:
            try:
                procs.append(await asyncio.to_thread(make_constraint, schema))
            except ConfigError as exc:
                raise APIError(400, str(exc), param="response_format") from exc
        top = req.logprob_count()
        recorder = LogprobRecorder(top) if top is not None else None
        if recorder is not None:
            procs.append(recorder)
        return tuple(procs), recorder

    async def submit(prompt_ids: list[int], req: _Sampling) -> tuple[Job, LogprobRecorder | None]:
        if len(prompt_ids) >= context:
            raise APIError(
                400,
                f"the prompt has {len(prompt_ids)} tokens; this model's context is {context}",
                param="prompt",
                code="context_length_exceeded",
            )
        room = context - len(prompt_ids)
        asked = req.max_completion_tokens or req.max_tokens
        if asked is not None and asked > room:
            raise APIError(
                400,
                f"max_tokens is {asked} but the context ({context} tokens) leaves {room} "
                f"after the prompt's {len(prompt_ids)}",
                param="max_tokens",
                code="context_length_exceeded",
            )
        try:
            params = req.sampling(min(default_max_tokens, room))
        except ConfigError as exc:
            raise APIError(400, str(exc)) from exc
        processors, recorder = await processors_for(req)
        try:
            return scheduler.submit(prompt_ids, params, processors), recorder
        except QueueFullError as exc:
            raise APIError(429, str(exc), "rate_limit_error", code="queue_full") from exc

    async def encode(text: str) -> list[int]:
        """The prompt's ids, as the file asks for BOS; tokenized off the event loop."""
        try:
            return await asyncio.to_thread(model.encode, text)
        except BitnetError as exc:
            raise APIError(400, str(exc), param="prompt") from exc

    def observe(
        job: Job, arrived: float, last: float | None, before: int, now: float, tokens: int
    ) -> tuple[float, int]:
        """Record a piece's latencies (``now``, ``tokens``: when it was made, tokens so far):
        queue wait and time to first token for the first piece, else the gap since the last
        piece shared among the tokens it carries."""
        if last is None:
            if job.started is not None:
                latencies.queue_wait.observe(job.started - job.enqueued)
            latencies.time_to_first_token.observe(now - arrived)
        elif tokens > before:
            latencies.inter_token.observe((now - last) / (tokens - before), tokens - before)
        return now, tokens

    async def watch_disconnect(job: Job, request: Request) -> None:
        """Cancel ``job`` as soon as the client goes away (the body is read by now, so the
        next ASGI message is the disconnect)."""
        while (await request.receive())["type"] != "http.disconnect":
            pass
        job.cancel()

    async def pieces(job: Job, request: Request) -> AsyncIterator[str]:
        """Text pieces of a job; cancels it the moment the client disconnects, streaming or not."""
        arrived = getattr(request.state, "arrived", job.enqueued)
        last, tokens = None, 0
        watcher = asyncio.create_task(watch_disconnect(job, request))
        try:
            while True:
                item, at, n = await job.out.get()
                if item is DONE:
                    if last is None and job.started is not None:
                        latencies.queue_wait.observe(job.started - job.enqueued)
                    break
                last, tokens = observe(job, arrived, last, tokens, at, n)
                yield item
        finally:
            watcher.cancel()
            job.cancel()  # a no-op when already finished; frees the sequence when not
        if job.error is not None:
            status = 400 if isinstance(job.error, (ContextLengthError, ConfigError)) else 500
            raise APIError(
                status,
                f"generation failed: {job.error}",
                "server_error" if status == 500 else "invalid_request_error",
            )

    def shown(job: Job) -> int:
        """Tokens whose text the client has (logprobs leave out what a stop string cut)."""
        return job.text.tokens_shown if job.text is not None else 0

    def usage(job: Job) -> dict:
        p, c = job.stats.prompt_tokens or len(job.prompt_ids), job.stats.generated_tokens
        return {"prompt_tokens": p, "completion_tokens": c, "total_tokens": p + c}

    def finish_reason(job: Job) -> str:
        return "stop" if job.stats.finish_reason == "stop" else "length"

    def sse(obj: Any) -> str:
        return f"data: {json.dumps(obj, ensure_ascii=False)}\n\n"

    # --- endpoints ------------------------------------------------------------------
    #: what the OpenAPI schema documents (Schemathesis checks every answer against it)
    generate_responses = {
        200: {"content": {"text/event-stream": {"schema": {}}}},  # JSON chunks, then [DONE]
        **error_responses(400, 401, 404, 413, 429),
    }

    @app.post("/v1/completions", responses=generate_responses)
    async def completions(req: CompletionRequest, request: Request) -> Any:
        check_model(req)
        if isinstance(req.prompt, str):
            ids = await encode(req.prompt)
        else:
            ids = [int(t) for t in req.prompt]
        if any(t < 0 or t >= model.config.vocab_size for t in ids):
            raise APIError(400, "token id out of the vocabulary", param="prompt")
        job, recorder = await submit(ids, req)
        cid, created = f"cmpl-{uuid.uuid4().hex}", int(time.time())
        sent = [0, 0]  # logprob entries and characters already sent

        def chunk(text: str, finish: str | None) -> dict:
            logprobs = None
            if recorder is not None:
                entries = recorder.entries[sent[0] : shown(job)]
                logprobs = completion_logprobs(model.tokenizer, entries, sent[1])
                sent[0] += len(entries)
                sent[1] += sum(len(t) for t in logprobs["tokens"])
            return {
                "id": cid,
                "object": "text_completion",
                "created": created,
                "model": model_name,
                "choices": [
                    {"index": 0, "text": text, "logprobs": logprobs, "finish_reason": finish}
                ],
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

    @app.post("/v1/chat/completions", responses=generate_responses)
    async def chat(req: ChatRequest, request: Request) -> Any:
        check_model(req)
        try:
            messages = [{"role": m.role, "content": m.text()} for m in req.messages]
            prompt_ids = await asyncio.to_thread(model.chat_ids, messages)
        except (ValueError, BitnetError) as exc:
            raise APIError(400, str(exc), param="messages") from exc
        job, recorder = await submit(prompt_ids, req)
        cid, created = f"chatcmpl-{uuid.uuid4().hex}", int(time.time())
        sent = [0]  # logprob entries already sent

        def logprobs() -> dict | None:
            if recorder is None:
                return None
            entries = recorder.entries[sent[0] : shown(job)]
            sent[0] += len(entries)
            return chat_logprobs(model.tokenizer, entries)

        def chunk(delta: dict, finish: str | None) -> dict:
            choice = {"index": 0, "delta": delta, "finish_reason": finish}
            if recorder is not None:
                choice["logprobs"] = logprobs()
            return {
                "id": cid,
                "object": "chat.completion.chunk",
                "created": created,
                "model": model_name,
                "choices": [choice],
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
                    "logprobs": logprobs(),
                    "finish_reason": finish_reason(job),
                }
            ],
            "usage": usage(job),
        }

    @app.get("/v1/models", responses=error_responses(401))
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

    @app.get("/metrics", response_class=PlainTextResponse)
    async def metrics() -> PlainTextResponse:
        return PlainTextResponse(
            render_metrics(model, scheduler, started, latencies),
            media_type="text/plain; version=0.0.4",
        )

    @app.get("/", response_class=HTMLResponse)
    async def index() -> HTMLResponse:
        page = resources.files("bitnet_core.server").joinpath("static/index.html").read_text()
        return HTMLResponse(page.replace("{{MODEL}}", model_name))

    return app
