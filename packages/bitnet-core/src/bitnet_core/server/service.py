"""The server's work behind its routes: requests to scheduler jobs, jobs to text and usage.

``Service`` holds what one server shares between its requests (the model,
its options, the scheduler, the latency histograms) and the steps every
endpoint takes: check the model name and the sampling fields, build the
per-sequence processors, submit to the scheduler, stream a job's pieces while
watching for a disconnect, and report usage. ``server/routes.py`` turns HTTP
requests into these calls; ``server/app.py`` puts the two together.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator
from typing import Any

from fastapi import Request

from ..errors import BitnetError, ConfigError, ContextLengthError
from ..model.processors import LogprobRecorder
from .metrics import Latencies
from .options import ServerOptions
from .scheduler import DONE, Job, QueueFullError, Scheduler
from .schemas import _Sampling, error_body


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


class Service:
    """One server's model, options and scheduler, and the steps its endpoints share."""

    def __init__(self, model: Any, model_name: str, options: ServerOptions) -> None:
        self.model, self.model_name, self.options = model, model_name, options
        self.scheduler = Scheduler(
            model,
            max_active=options.max_active,
            max_queue=options.max_queue,
            step_tokens=options.step_tokens,
            prefix_cache=options.prefix_cache,
        )
        self.latencies = Latencies()
        self.started = time.time()
        kv = getattr(getattr(model, "runner", None), "kv", None)
        self.context = int(getattr(kv, "max_seq_len", 0) or model.config.context_length)
        self._guidance: list = []  # the model's llguidance tokenizer, built on first use
        self._guidance_lock = threading.Lock()

    def close(self) -> None:
        self.scheduler.close()

    def check_model(self, req: _Sampling) -> None:
        if req.model not in (None, "", self.model_name):
            raise APIError(
                404,
                f"the model {req.model!r} does not exist; this server has {self.model_name!r}",
                param="model",
                code="model_not_found",
            )
        missing = req.unsupported()
        if missing is not None:  # "" too: a field may have an empty name
            raise APIError(
                400,
                f"{missing or repr(missing)} is not supported by this server",
                param=(missing.split() or [missing])[0],
            )

    def make_constraint(self, schema: dict | None) -> Any:
        from ..model.structured import JsonConstraint, guidance_tokenizer, json_grammar

        if self.model.tokenizer is None:
            raise ConfigError("this model file has no tokenizer: no structured output")
        grammar = json_grammar(schema)
        with self._guidance_lock:
            if not self._guidance:
                vocab = self.model.config.vocab_size
                self._guidance.append(
                    guidance_tokenizer(self.model.tokenizer, vocab, self.model.eos_ids)
                )
        return JsonConstraint(self._guidance[0], grammar)

    async def processors_for(self, req: _Sampling) -> tuple[tuple, LogprobRecorder | None]:
        """The job's per-sequence processors: the JSON constraint, the logprob recorder."""
        procs: list = []
        constrained, schema = req.json_schema()
        if constrained:
            try:
                procs.append(await asyncio.to_thread(self.make_constraint, schema))
            except ConfigError as exc:
                raise APIError(400, str(exc), param="response_format") from exc
        top = req.logprob_count()
        recorder = LogprobRecorder(top) if top is not None else None
        if recorder is not None:
            procs.append(recorder)
        return tuple(procs), recorder

    async def submit(
        self, prompt_ids: list[int], req: _Sampling
    ) -> tuple[Job, LogprobRecorder | None]:
        if len(prompt_ids) >= self.context:
            raise APIError(
                400,
                f"the prompt has {len(prompt_ids)} tokens; this model's context is {self.context}",
                param="prompt",
                code="context_length_exceeded",
            )
        room = self.context - len(prompt_ids)
        asked = req.max_completion_tokens or req.max_tokens
        if asked is not None and asked > room:
            raise APIError(
                400,
                f"max_tokens is {asked} but the context ({self.context} tokens) leaves {room} "
                f"after the prompt's {len(prompt_ids)}",
                param="max_tokens",
                code="context_length_exceeded",
            )
        try:
            params = req.sampling(min(self.options.max_tokens, room))
        except ConfigError as exc:
            raise APIError(400, str(exc)) from exc
        processors, recorder = await self.processors_for(req)
        try:
            return self.scheduler.submit(prompt_ids, params, processors), recorder
        except QueueFullError as exc:
            raise APIError(429, str(exc), "rate_limit_error", code="queue_full") from exc

    async def encode(self, text: str) -> list[int]:
        """The prompt's ids, as the file asks for BOS; tokenized off the event loop."""
        try:
            return await asyncio.to_thread(self.model.encode, text)
        except BitnetError as exc:
            raise APIError(400, str(exc), param="prompt") from exc

    def observe(
        self, job: Job, arrived: float, last: float | None, before: int, now: float, tokens: int
    ) -> tuple[float, int]:
        """Record a piece's latencies (``now``, ``tokens``: when it was made, tokens so far):
        queue wait and time to first token for the first piece, else the gap since the last
        piece shared among the tokens it carries."""
        if last is None:
            if job.started is not None:
                self.latencies.queue_wait.observe(job.started - job.enqueued)
            self.latencies.time_to_first_token.observe(now - arrived)
        elif tokens > before:
            self.latencies.inter_token.observe((now - last) / (tokens - before), tokens - before)
        return now, tokens

    async def watch_disconnect(self, job: Job, request: Request) -> None:
        """Cancel ``job`` as soon as the client goes away (the body is read by now, so the
        next ASGI message is the disconnect)."""
        while (await request.receive())["type"] != "http.disconnect":
            pass
        job.cancel()

    async def pieces(self, job: Job, request: Request) -> AsyncIterator[str]:
        """Text pieces of a job; cancels it the moment the client disconnects, streaming or not."""
        arrived = getattr(request.state, "arrived", job.enqueued)
        last, tokens = None, 0
        watcher = asyncio.create_task(self.watch_disconnect(job, request))
        try:
            while True:
                item, at, n = await job.out.get()
                if item is DONE:
                    if last is None and job.started is not None:
                        self.latencies.queue_wait.observe(job.started - job.enqueued)
                    break
                last, tokens = self.observe(job, arrived, last, tokens, at, n)
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

    def shown(self, job: Job) -> int:
        """Tokens whose text the client has (logprobs leave out what a stop string cut)."""
        text = job.step.text if job.step is not None else None
        return text.tokens_shown if text is not None else 0

    def usage(self, job: Job) -> dict:
        p, c = job.stats.prompt_tokens or len(job.prompt_ids), job.stats.generated_tokens
        return {
            "prompt_tokens": p,
            "completion_tokens": c,
            "total_tokens": p + c,
            "prompt_tokens_details": {"cached_tokens": job.stats.cached_tokens},
        }

    def finish_reason(self, job: Job) -> str:
        return "stop" if job.stats.finish_reason == "stop" else "length"
