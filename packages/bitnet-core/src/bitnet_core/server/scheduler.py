"""The scheduler of ``bitnet serve``: one worker thread, continuous batching.

Requests wait in a bounded queue; up to ``max_active`` of them run together.
Each step of the worker is one ``runner.forward_batch`` call for every
active sequence: one token of each sequence that is decoding, then prompt
tokens of the sequences still prefilling, up to ``step_tokens`` tokens in
all (the step's token budget). A prompt longer than what is left of the
budget goes in chunks over several steps, shortest remaining prompt first,
so a long prompt delays the other streams by at most one chunk a step and a
short request that arrives meanwhile gets its first token after at most
about two steps. A new request joins at the next step; a finished or
cancelled one leaves at once and frees its KV-cache sequence. Text pieces
are handed to the request's asyncio queue with ``call_soon_threadsafe``.
"""

from __future__ import annotations

import asyncio
import collections
import itertools
import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import BitnetError, ConfigError, ContextLengthError
from ..model import prefix_cache as prefix_cache_module
from ..model.generation import GenerationStats
from ..model.processors import TokenProcessor
from ..model.sampling import SamplingParams
from ..model.step import TokenStep

log = logging.getLogger("bitnet.server")

DONE = object()  # sentinel: the sequence ended (its stats are final)

#: default token budget of a step: the decode tokens plus a prefill chunk
DEFAULT_STEP_TOKENS = 128


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
    #: per-sequence logits processors (structured output, logprobs): model/processors.py
    processors: tuple[TokenProcessor, ...] = ()
    # --- the worker's state of the generation -------------------------------------
    seq: Any = None  # the KV-cache sequence, once started
    prefilled: int = 0  # prompt tokens in the cache
    next_token: int | None = None  # sampled, to be fed at the next step
    step: TokenStep | None = None  # the per-token rules (model/step.py)
    started: float | None = None  # first step of the prompt (queue wait = started - enqueued)
    first_token_step: int | None = None  # the scheduler step that sampled the first token

    def cancel(self) -> None:
        """Called when the client goes away: the worker drops the sequence at its next step."""
        self.cancelled.set()

    def _emit(self, item: Any) -> None:
        """Hand ``item`` (a text piece or DONE) to the request, stamped with the time and the
        tokens generated so far (the server's latency histograms)."""
        mark = (item, time.perf_counter(), self.stats.generated_tokens)
        self.loop.call_soon_threadsafe(self.out.put_nowait, mark)

    @property
    def prefilling(self) -> bool:
        return self.prefilled < len(self.prompt_ids)


@dataclass
class SchedulerStats:
    requests_total: int = 0
    requests_rejected: int = 0
    requests_failed: int = 0
    requests_cancelled: int = 0
    prompt_tokens_total: int = 0
    generated_tokens_total: int = 0
    decode_seconds_total: float = 0.0
    steps_total: int = 0  # forward_batch calls
    step_tokens_total: int = 0  # tokens through them
    step_tokens_max: int = 0  # the most in one step


class Scheduler:
    """Runs every request's generation on one worker thread, one batched forward a step.

    With ``prefix_cache`` (the default) a request starts from the longest prefix of
    its prompt whose KV another request computed (``model/prefix_cache.py``): a
    sequence's prompt is cached once its prefill is done, the rest of its tokens
    when it finishes. A request whose prompt shares at least a block's worth of
    tokens beyond the cache with a prompt still being computed waits for that
    one's prefill.
    """

    def __init__(
        self,
        model: Any,
        max_active: int = 8,
        max_queue: int = 256,
        step_tokens: int | None = None,
        prefix_cache: bool = True,
    ) -> None:
        step_tokens = (
            max(DEFAULT_STEP_TOKENS, max_active + 1) if step_tokens is None else step_tokens
        )
        if not isinstance(max_active, int) or max_active < 1:
            raise ConfigError(f"max_active must be a positive integer, got {max_active!r}")
        if not isinstance(step_tokens, int) or step_tokens <= max_active:
            raise ConfigError(
                f"step_tokens ({step_tokens!r}) must be an integer above max_active ({max_active}): "
                "every decoding sequence takes one token of a step and prompts need the rest"
            )
        self.model = model
        self.max_active = max_active
        self.max_queue = max_queue
        self.step_tokens = step_tokens
        self.stats = SchedulerStats()
        self.prefix = prefix_cache_module.attach(model.runner) if prefix_cache else None
        self._ids = itertools.count(1)
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

    def submit(
        self,
        prompt_ids: list[int],
        params: SamplingParams,
        processors: tuple[TokenProcessor, ...] = (),
    ) -> Job:
        job = Job(list(prompt_ids), params, asyncio.get_running_loop(), processors=processors)
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
        if self.prefix is not None:
            prefix_cache_module.detach(self.model.runner)
            self.prefix = None

    # --- the worker thread ----------------------------------------------------------
    def _start(self, job: Job) -> None:
        """Give a job its sequence and sampler (raises for a prompt that cannot fit)."""
        if not job.prompt_ids:
            raise ContextLengthError(
                "the prompt is empty: nothing to condition on (add a BOS token)"
            )
        job.seq = self.model.runner.new_cache()
        if len(job.prompt_ids) >= job.seq.max_len:
            raise ContextLengthError(
                f"prompt of {len(job.prompt_ids)} tokens does not fit the context of "
                f"{job.seq.max_len} tokens"
            )
        if self.prefix is not None:
            job.prefilled = self.prefix.start(job.seq, job.prompt_ids)
            job.stats.cached_tokens = job.prefilled
        job.step = TokenStep(
            job.params,
            job.prompt_ids,
            eos_ids=self.model.eos_ids,
            processors=job.processors,
            decode=self.model.decode,
            stats=job.stats,
        )
        job.stats.prompt_tokens = len(job.prompt_ids)
        job.started = time.perf_counter()

    def _finish(self, job: Job, error: BaseException | None = None, reason: str = "") -> None:
        if reason:
            job.stats.finish_reason = reason
        if job.seq is not None:
            if self.prefix is not None and error is None and job.step is not None:
                self.prefix.store(job.seq, job.step.history)  # the tokens it holds
            job.seq.close()  # frees the KV-cache blocks
            job.seq = None
        job.error = error
        if error is not None:
            self.stats.requests_failed += 1
        elif job.cancelled.is_set():
            self.stats.requests_cancelled += 1
        self.stats.prompt_tokens_total += job.stats.prompt_tokens
        self.stats.generated_tokens_total += job.stats.generated_tokens
        self.stats.decode_seconds_total += job.stats.decode_s + job.stats.prompt_s
        s = job.stats
        log.info(
            "request %d: prompt %d tokens (%d cached), %d generated, finish %s, "
            "prompt %.3f s, decode %.3f s%s",
            next(self._ids), s.prompt_tokens, s.cached_tokens, s.generated_tokens,
            s.finish_reason or ("error" if error else "cancelled"), s.prompt_s, s.decode_s,
            f", error: {error}" if error else "",
        )  # fmt: skip
        job._emit(DONE)

    def _plan(self, jobs: list[Job]) -> list[tuple[Job, list[int]]]:
        """The step: each decoding job's next token, then prompt chunks within the budget.

        A prompt chunk is never a lone token of a longer prompt (a chunk that would leave
        one token takes one fewer; one that would be one token waits for a step with
        room): a one-token chunk runs the decode attention, whose sums are not
        bit-identical to the prompt attention's on the native CPU, and a prompt's logits
        then depend on how the steps happened to cut it."""
        plan = [(j, [j.next_token]) for j in jobs if not j.prefilling]
        budget = self.step_tokens - len(plan)
        for j in sorted(
            (j for j in jobs if j.prefilling), key=lambda j: len(j.prompt_ids) - j.prefilled
        ):
            if budget <= 0:
                break
            rest = len(j.prompt_ids) - j.prefilled
            n = min(rest, budget)
            if rest - n == 1:
                n -= 1
            if n < min(2, rest):
                continue
            plan.append((j, j.prompt_ids[j.prefilled : j.prefilled + n]))
            budget -= n
        return plan

    def _forward(self, plan: list[tuple[Job, list[int]]]) -> list[np.ndarray | BaseException]:
        """Logits of each planned job's last token (or the error its sequence raised)."""
        runner = self.model.runner
        items = [(np.asarray(ids, dtype=np.int64), j.seq) for j, ids in plan]
        try:
            return list(runner.forward_batch(items))
        except Exception:  # noqa: BLE001 - find the sequence(s) at fault, one by one
            out: list[np.ndarray | BaseException] = []
            for item in items:
                try:
                    out.append(runner.forward_batch([item])[0])
                except Exception as exc:  # noqa: BLE001
                    out.append(exc)
            return out

    def _after(self, job: Job, n_fed: int, logits: np.ndarray, seconds: float) -> bool:
        """Take a step's result for a job; False when the job is finished."""
        if job.prefilling:
            job.prefilled += n_fed
            if job.prefilling:
                return True
            job.stats.prompt_s = time.perf_counter() - job.started  # type: ignore[operator]
            if self.prefix is not None:  # others sharing the prompt may start from it now
                self.prefix.store(job.seq, job.prompt_ids)
        else:
            job.stats.decode_s += seconds
            job.stats.decode_steps += 1
        out = job.step(logits, room=job.seq.length + 1 <= job.seq.max_len)  # type: ignore[misc]
        if out.token is not None and job.first_token_step is None:
            job.first_token_step = self.stats.steps_total
        if out.piece:
            job._emit(out.piece)
        if out.finish:
            self._finish(job, reason=out.finish)
            return False
        job.next_token = out.token
        return True

    def _step(self, jobs: list[Job]) -> list[Job]:
        """One batched forward for the active jobs; the jobs that finished."""
        finished: list[Job] = []
        live: list[Job] = []
        leaders = [j for j in jobs if j.seq is not None and j.prefilling]
        for job in jobs:
            if job.cancelled.is_set():
                self._finish(job)
                finished.append(job)
                continue
            if job.seq is None:
                if self._follows(job, leaders):
                    continue  # starts once the leader's prompt blocks are cached
                try:
                    self._start(job)
                except Exception as exc:  # noqa: BLE001 - a bad request must not stop the server
                    self._finish(job, exc)
                    finished.append(job)
                    continue
            live.append(job)
            if job.prefilling and job not in leaders:
                leaders.append(job)
        plan = self._plan(live)
        if not plan:
            return finished
        t0 = time.perf_counter()
        results = self._forward(plan)
        seconds = time.perf_counter() - t0
        n_tokens = sum(len(ids) for _, ids in plan)
        self.stats.steps_total += 1
        self.stats.step_tokens_total += n_tokens
        self.stats.step_tokens_max = max(self.stats.step_tokens_max, n_tokens)
        for (job, ids), res in zip(plan, results, strict=True):
            try:
                if isinstance(res, BaseException):
                    raise res
                keep = self._after(job, len(ids), res, seconds)
            except Exception as exc:  # noqa: BLE001
                self._finish(job, exc)
                keep = False
            if not keep:
                finished.append(job)
        return finished

    def _follows(self, job: Job, leaders: list[Job]) -> bool:
        """True when a prompt being computed shares at least a block's worth of tokens more
        with ``job``'s than the cache holds now (so ``job`` should wait for it; a few shared
        tokens, a chat template's header, are not worth the wait)."""
        if self.prefix is None or not leaders:
            return False
        ids = np.asarray(job.prompt_ids)
        best = 0
        for lead in leaders:
            other = np.asarray(lead.prompt_ids[: ids.size])
            n = min(other.size, ids.size - 1)
            diff = np.flatnonzero(ids[:n] != other[:n])
            best = max(best, int(diff[0]) if diff.size else n)
        return best - self.prefix.reusable(job.prompt_ids) >= self.prefix.block_tokens

    def _run(self) -> None:
        while True:
            with self._cv:
                while not self._stop and not self._pending and not self._active:
                    self._cv.wait()
                if self._stop:
                    return
                gone = [j for j in self._pending if j.cancelled.is_set()]
                for job in gone:  # cancelled while queued: leave at once, not at a free slot
                    self._pending.remove(job)
                while self._pending and len(self._active) < self.max_active:
                    self._active.append(self._pending.popleft())
                batch = list(self._active)
            for job in gone:
                self._finish(job)
            if not batch:
                continue
            finished = self._step(batch)
            if finished:
                with self._cv:
                    self._active = [j for j in self._active if j not in finished]
