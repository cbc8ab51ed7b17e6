"""The HTTP routes of ``bitnet serve``: OpenAI-compatible endpoints over a ``Service``.

``add_routes(app, svc)`` registers ``/v1/completions``, ``/v1/chat/completions``
(both with ``stream: true`` as server-sent events), ``/v1/models``, ``/health``,
``/metrics`` and ``/`` (the chat page). Each turns its request into the
service's steps (``server/service.py``) and its answer into the OpenAI body.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncIterator
from importlib import resources
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, PlainTextResponse, StreamingResponse

from .._version import __version__
from ..errors import BitnetError
from .logprobs import chat_logprobs, completion_logprobs
from .metrics import render_metrics
from .schemas import ChatRequest, CompletionRequest, error_responses
from .service import APIError, Service


def sse(obj: Any) -> str:
    return f"data: {json.dumps(obj, ensure_ascii=False)}\n\n"


#: what the OpenAPI schema documents for the generation routes (Schemathesis checks every
#: answer against it)
GENERATE_RESPONSES: dict = {
    200: {"content": {"text/event-stream": {"schema": {}}}},  # JSON chunks, then [DONE]
    **error_responses(400, 401, 404, 413, 429),
}


def add_routes(app: FastAPI, svc: Service) -> None:
    """Register the endpoints of ``svc`` on ``app``."""

    @app.post("/v1/completions", responses=GENERATE_RESPONSES)
    async def completions(req: CompletionRequest, request: Request) -> Any:
        svc.check_model(req)
        if isinstance(req.prompt, str):
            ids = await svc.encode(req.prompt)
        else:
            ids = [int(t) for t in req.prompt]
        if any(t < 0 or t >= svc.model.config.vocab_size for t in ids):
            raise APIError(400, "token id out of the vocabulary", param="prompt")
        job, recorder = await svc.submit(ids, req)
        cid, created = f"cmpl-{uuid.uuid4().hex}", int(time.time())
        sent = [0, 0]  # logprob entries and characters already sent

        def chunk(text: str, finish: str | None) -> dict:
            logprobs = None
            if recorder is not None:
                entries = recorder.entries[sent[0] : svc.shown(job)]
                logprobs = completion_logprobs(svc.model.tokenizer, entries, sent[1])
                sent[0] += len(entries)
                sent[1] += sum(len(t) for t in logprobs["tokens"])
            return {
                "id": cid,
                "object": "text_completion",
                "created": created,
                "model": svc.model_name,
                "choices": [
                    {"index": 0, "text": text, "logprobs": logprobs, "finish_reason": finish}
                ],
            }

        if req.stream:

            async def events() -> AsyncIterator[str]:
                try:
                    async for piece in svc.pieces(job, request):
                        yield sse(chunk(piece, None))
                except APIError as exc:
                    yield sse(exc.body)
                    return
                final = chunk("", svc.finish_reason(job))
                final["usage"] = svc.usage(job)
                yield sse(final)
                yield "data: [DONE]\n\n"

            return StreamingResponse(events(), media_type="text/event-stream")
        text = "".join([p async for p in svc.pieces(job, request)])
        body = chunk(text, svc.finish_reason(job))
        body["usage"] = svc.usage(job)
        return body

    @app.post("/v1/chat/completions", responses=GENERATE_RESPONSES)
    async def chat(req: ChatRequest, request: Request) -> Any:
        svc.check_model(req)
        try:
            messages = [{"role": m.role, "content": m.text()} for m in req.messages]
            prompt_ids = await asyncio.to_thread(svc.model.chat_ids, messages)
        except (ValueError, BitnetError) as exc:
            raise APIError(400, str(exc), param="messages") from exc
        job, recorder = await svc.submit(prompt_ids, req)
        cid, created = f"chatcmpl-{uuid.uuid4().hex}", int(time.time())
        sent = [0]  # logprob entries already sent

        def logprobs() -> dict | None:
            if recorder is None:
                return None
            entries = recorder.entries[sent[0] : svc.shown(job)]
            sent[0] += len(entries)
            return chat_logprobs(svc.model.tokenizer, entries)

        def chunk(delta: dict, finish: str | None) -> dict:
            choice = {"index": 0, "delta": delta, "finish_reason": finish}
            if recorder is not None:
                choice["logprobs"] = logprobs()
            return {
                "id": cid,
                "object": "chat.completion.chunk",
                "created": created,
                "model": svc.model_name,
                "choices": [choice],
            }

        if req.stream:

            async def events() -> AsyncIterator[str]:
                yield sse(chunk({"role": "assistant", "content": ""}, None))
                try:
                    async for piece in svc.pieces(job, request):
                        yield sse(chunk({"content": piece}, None))
                except APIError as exc:
                    yield sse(exc.body)
                    return
                final = chunk({}, svc.finish_reason(job))
                final["usage"] = svc.usage(job)
                yield sse(final)
                yield "data: [DONE]\n\n"

            return StreamingResponse(events(), media_type="text/event-stream")
        text = "".join([p async for p in svc.pieces(job, request)])
        return {
            "id": cid,
            "object": "chat.completion",
            "created": created,
            "model": svc.model_name,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": text},
                    "logprobs": logprobs(),
                    "finish_reason": svc.finish_reason(job),
                }
            ],
            "usage": svc.usage(job),
        }

    @app.get("/v1/models", responses=error_responses(401))
    async def models() -> dict:
        return {
            "object": "list",
            "data": [
                {
                    "id": svc.model_name,
                    "object": "model",
                    "created": int(svc.started),
                    "owned_by": "bitnet",
                }
            ],
        }

    @app.get("/health")
    async def health() -> dict:
        sel = svc.model.selection
        return {
            "status": "ok",
            "model": svc.model_name,
            "provider": getattr(svc.model.provider, "name", "?"),
            "summary": str(sel) if sel else None,
            "queue_depth": svc.scheduler.queue_depth,
            "active": svc.scheduler.active,
            "uptime_s": round(time.time() - svc.started, 3),
            "version": __version__,
        }

    @app.get("/metrics", response_class=PlainTextResponse)
    async def metrics() -> PlainTextResponse:
        return PlainTextResponse(
            render_metrics(svc.model, svc.scheduler, svc.started, svc.latencies),
            media_type="text/plain; version=0.0.4",
        )

    @app.get("/", response_class=HTMLResponse)
    async def index() -> HTMLResponse:
        page = resources.files("bitnet_core.server").joinpath("static/index.html").read_text()
        return HTMLResponse(page.replace("{{MODEL}}", svc.model_name))
