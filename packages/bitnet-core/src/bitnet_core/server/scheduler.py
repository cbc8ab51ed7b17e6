"""The decode scheduler of ``bitnet serve``: one worker thread, many sequences.

Requests wait in a bounded queue; up to ``max_active`` of them decode
together. Each round the worker advances every active sequence by one token
(continuous batching by interleaving: a new request joins at the next round,
a finished or cancelled one leaves at once and frees its KV-cache sequence),
so the event loop never blocks on the model and short requests are not stuck
behind long ones. Text pieces are handed to the request's asyncio queue with
``call_soon_threadsafe``.
"""

from __future__ import annotations

import asyncio
import collections
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from ..errors import BitnetError
from ..model.generation import GenerationStats, generate_tokens, stream_text
from ..model.sampling import SamplingParams

DONE = object()  # sentinel: the sequence ended (its stats are final)


class QueueFullError(BitnetError):
    """The server's request queue is full (HTTP 429)."""


@dataclass(eq=False)
class Job:
    """One request: its prompt ids, sampling, and where its text pieces go."""

    prompt_ids: list[int]
    params: SamplingParams
    loop: asyncio.AbstractEventLoop
    out: asyncio.Queue = field(default_factory=asyncio.Queue)
    stats: GenerationStats = field(default_factory=GenerationStats)
    cancelled: threading.Event = field(default_factory=threading.Event)
    error: BaseException | None = None
    enqueued: float = field(default_factory=time.perf_counter)
    started: float | None = None  # when the worker took it up (queue wait = started - enqueued)
    pieces: Iterator[str] | None = None
    #: per-sequence logits processors (structured output, logprobs): model/processors.py
    processors: tuple = ()

    def cancel(self) -> None:
        """Called when the client goes away: the worker drops the sequence at its next round."""
        self.cancelled.set()

    def _emit(self, item: Any) -> None:
        """Hand ``item`` (a text piece or DONE) to the request, stamped with the time and the
        tokens generated so far (the server's latency histograms)."""
        mark = (item, time.perf_counter(), self.stats.generated_tokens)
        self.loop.call_soon_threadsafe(self.out.put_nowait, mark)


@dataclass
class SchedulerStats:
    requests_total: int = 0
    requests_rejected: int = 0
    requests_failed: int = 0
    requests_cancelled: int = 0
    prompt_tokens_total: int = 0
    generated_tokens_total: int = 0
    decode_seconds_total: float = 0.0


class Scheduler:
    """Runs every request's generation on one worker thread, interleaved token by token."""

    def __init__(self, model: Any, max_active: int = 8, max_queue: int = 256) -> None:
        self.model = model
        self.max_active = max_active
        self.max_queue = max_queue
        self.stats = SchedulerStats()
        self._pending: collections.deque[Job] = collections.deque()
        self._active: list[Job] = []
        self._cv = threading.Condition()
        self._stop = False
        self._thread = threading.Thread(target=self._run, name="bitnet-decode", daemon=True)
        self._thread.start()

    # --- called from the event loop ----------------------------------------------
    @property
    def queue_depth(self) -> int:
        return len(self._pending)

    @property
    def active(self) -> int:
        return len(self._active)

    def submit(self, prompt_ids: list[int], params: SamplingParams, processors: tuple = ()) -> Job:
        job = Job(prompt_ids, params, asyncio.get_running_loop(), processors=processors)
        with self._cv:
            if len(self._pending) + len(self._active) >= self.max_queue:
                self.stats.requests_rejected += 1
                raise QueueFullError(
                    f"the server is busy: {self.max_queue} requests queued or running; retry later"
                )
            self.stats.requests_total += 1
            self._pending.append(job)
            self._cv.notify()
        return job

    def close(self) -> None:
        with self._cv:
            self._stop = True
            self._cv.notify()
        self._thread.join(timeout=10)

    # --- the worker thread ----------------------------------------------------------
    def _start(self, job: Job) -> None:
        job.started = time.perf_counter()
        tokens = generate_tokens(
            self.model.backend,
            job.prompt_ids,
            job.params,
            eos_ids=self.model.eos_ids,
            stats=job.stats,
            processors=job.processors,
        )
        job.pieces = stream_text(
            tokens, self.model.decode, job.prompt_ids, job.params.stop, job.stats
        )

    def _finish(self, job: Job, error: BaseException | None = None) -> None:
        if job.pieces is not None:
            job.pieces.close()  # frees the KV-cache sequence
        job.error = error
        if error is not None:
            self.stats.requests_failed += 1
        elif job.cancelled.is_set():
            self.stats.requests_cancelled += 1
        self.stats.prompt_tokens_total += job.stats.prompt_tokens
        self.stats.generated_tokens_total += job.stats.generated_tokens
        self.stats.decode_seconds_total += job.stats.decode_s + job.stats.prompt_s
        job._emit(DONE)

    def _step(self, job: Job) -> bool:
        """Advance one job by one piece; False when it is finished."""
        if job.cancelled.is_set():
            self._finish(job)
            return False
        try:
            if job.pieces is None:
                self._start(job)
            piece = next(job.pieces)  # type: ignore[arg-type]
        except StopIteration:
            self._finish(job)
            return False
        except Exception as exc:  # a failing request must not take the server down
            self._finish(job, exc)
            return False
        if piece:
            job._emit(piece)
        return True

    def _run(self) -> None:
        while True:
            with self._cv:
                while not self._stop and not self._pending and not self._active:
                    self._cv.wait()
                if self._stop:
                    return
                while self._pending and len(self._active) < self.max_active:
                    self._active.append(self._pending.popleft())
                batch = list(self._active)
            finished = [job for job in batch if not self._step(job)]
            if finished:
                with self._cv:
                    self._active = [j for j in self._active if j not in finished]
