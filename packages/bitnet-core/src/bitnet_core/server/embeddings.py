"""``/v1/embeddings`` of ``bitnet serve`` (OpenAI's shape), and its batching worker.

``register(app, model, model_name)`` adds the endpoint. Its requests go to one
worker thread (``EmbeddingBatcher``) that takes every input of every request
waiting, up to ``batch_tokens`` tokens, and runs them as one prefill
(``GenericRunner.hidden_states``: all tokens through the matmuls together), so the
64 inputs of one request, or 64 requests of one input arriving together, cost one
batched forward rather than 64. For an embedding model the text-generation
endpoints answer 400 (registered before them, so they win the route).

Request: ``input`` a string, a list of strings, a token-id list or a list of them;
``encoding_format`` ``float`` (default) or ``base64`` (little-endian float32, what
the OpenAI client asks for); ``dimensions`` (Matryoshka: the first N values,
normalized again). Empty or over-long inputs get a 400 naming the input.
"""

from __future__ import annotations

import asyncio
import base64
import collections
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
from fastapi import FastAPI
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field

from ..errors import BitnetError
from ..model.embeddings import check_inputs, embed_ids, normalize
from .schemas import error_body, error_responses

#: the most tokens the worker puts through one forward (more waits for the next)
DEFAULT_BATCH_TOKENS = 16384


class EmbeddingRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    input: str | list[str] | list[int] | list[list[int]]
    model: str | None = None
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: int | None = Field(default=None, ge=1)
    user: str | None = None


@dataclass(eq=False)
class _Job:
    inputs: list[list[int]]
    loop: asyncio.AbstractEventLoop
    future: asyncio.Future
    result: Any = field(default=None)


class EmbeddingBatcher:
    """One worker thread that embeds the inputs of all waiting requests in one batch."""

    def __init__(self, model: Any, batch_tokens: int = DEFAULT_BATCH_TOKENS) -> None:
        self.model = model
        self.batch_tokens = batch_tokens
        self.batches = 0  # forwards run (each may serve several requests)
        self.submitted = 0  # requests taken in
        self._pending: collections.deque[_Job] = collections.deque()
        self._cv = threading.Condition()
        self._stop = False
        self._thread = threading.Thread(target=self._run, name="bitnet-embed", daemon=True)
        self._thread.start()

    async def embed(self, inputs: list[list[int]]) -> np.ndarray:
        """Raw pooled vectors ``[len(inputs), hidden]`` (not normalized)."""
        loop = asyncio.get_running_loop()
        job = _Job(inputs, loop, loop.create_future())
        with self._cv:
            self._pending.append(job)
            self.submitted += 1
            self._cv.notify()
        return await job.future

    def close(self) -> None:
        with self._cv:
            self._stop = True
            self._cv.notify()
        self._thread.join(timeout=10)

    def _take(self) -> list[_Job]:
        """The waiting jobs that fit the token budget (at least one)."""
        jobs, tokens = [], 0
        while self._pending:
            n = sum(len(ids) for ids in self._pending[0].inputs)
            if jobs and tokens + n > self.batch_tokens:
                break
            jobs.append(self._pending.popleft())
            tokens += n
        return jobs

    def _run(self) -> None:
        while True:
            with self._cv:
                while not self._stop and not self._pending:
                    self._cv.wait()
                if self._stop:
                    return
                jobs = self._take()
            flat = [ids for job in jobs for ids in job.inputs]
            try:
                vectors: Any = embed_ids(self.model.runner, flat, normalized=False)
                self.batches += 1
            except Exception as exc:  # noqa: BLE001 - handed to the requests
                vectors = exc
            at = 0
            for job in jobs:
                n = len(job.inputs)
                res = vectors if isinstance(vectors, Exception) else vectors[at : at + n]
                at += n
                job.loop.call_soon_threadsafe(_settle, job.future, res)


def _settle(future: asyncio.Future, result: Any) -> None:
    if future.done():  # the client went away
        return
    if isinstance(result, BaseException):
        future.set_exception(result)
    else:
        future.set_result(result)


def _error(status: int, message: str, param: str | None = None, code: str | None = None) -> Any:
    return JSONResponse(error_body(message, param=param, code=code), status_code=status)


def register(app: FastAPI, model: Any, model_name: str) -> Callable[[], None]:
    """Add ``/v1/embeddings`` (and, for an embedding model, 400s on the generation routes);
    returns what stops the worker (call it when the app shuts down)."""
    is_embedding = bool(getattr(model.config, "is_embedding", False))
    context = int(model.config.context_length)
    batcher = EmbeddingBatcher(model) if is_embedding else None
    app.state.embedding_batcher = batcher
    if batcher is not None:

        async def not_generative() -> Any:
            return _error(
                400,
                f"{model_name!r} is an embedding model: it has no text generation; "
                "use /v1/embeddings",
                code="model_not_generative",
            )

        for path in ("/v1/completions", "/v1/chat/completions"):
            app.add_api_route(path, not_generative, methods=["POST"], include_in_schema=False)

    @app.post("/v1/embeddings", responses=error_responses(400, 401, 404, 413))
    async def embeddings(req: EmbeddingRequest) -> Any:
        if req.model not in (None, "", model_name):
            return _error(
                404,
                f"the model {req.model!r} does not exist; this server has {model_name!r}",
                param="model",
                code="model_not_found",
            )
        if batcher is None:
            return _error(
                400,
                f"{model_name!r} is a language model, not an embedding model "
                "(its file has no pooling_type)",
                param="model",
                code="model_not_embedding",
            )
        width = int(model.config.hidden_size)
        if req.dimensions is not None and req.dimensions > width:
            return _error(
                400, f"dimensions must be at most {width}, got {req.dimensions}", "dimensions"
            )
        raw = req.input
        items: list = [raw] if isinstance(raw, str) or (raw and isinstance(raw[0], int)) else raw
        if not items:
            return _error(400, "input is empty: nothing to embed", param="input")
        try:
            inputs = await asyncio.to_thread(model.embed_inputs, items)
            check_inputs(inputs, context, int(model.config.vocab_size))
        except BitnetError as exc:
            code = "context_length_exceeded" if "context" in str(exc) else None
            return _error(400, str(exc), param="input", code=code)
        vectors = normalize(await batcher.embed(inputs), req.dimensions)
        data = []
        for i, v in enumerate(vectors):
            if req.encoding_format == "base64":
                emb: Any = base64.b64encode(v.astype("<f4").tobytes()).decode("ascii")
            else:
                emb = [float(x) for x in v]
            data.append({"object": "embedding", "index": i, "embedding": emb})
        tokens = sum(len(ids) for ids in inputs)
        return {
            "object": "list",
            "data": data,
            "model": model_name,
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
        }

    return batcher.close if batcher is not None else (lambda: None)
