"""The generation loop: prefill the prompt, then sample and decode one token at a time."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence

import numpy as np

from ..errors import ContextLengthError
from .processors import TokenProcessor
from .sampling import SamplingParams
from .stats import GenerationStats
from .step import Step, TokenStep
from .text import TextPieces

#: greedy tokens a device launch decodes (``decode_greedy``), when the runner has it
DEVICE_TOKENS = 8

__all__ = [
    "GenerationStats",
    "Session",
    "Step",
    "TextPieces",
    "generate_steps",
    "generate_tokens",
    "stream_text",
]


class Session:
    """One KV-cache sequence kept across generations (a chat): each new prompt
    reuses the cached tokens it shares as a prefix with what the sequence holds."""

    def __init__(self, runner) -> None:
        self.runner = runner
        self.seq = None
        self.ids: list[int] = []

    @property
    def max_len(self) -> int:
        if self.seq is None or not self.seq.usable:
            self.seq, self.ids = self.runner.new_cache(), []
        return self.seq.max_len

    def prefill(self, ids: list[int]) -> tuple[np.ndarray, int]:
        """Last-position logits of ``ids``, computing only the uncached suffix; (logits, reused)."""
        if self.seq is None or not self.seq.usable:
            self.seq, self.ids = self.runner.new_cache(), []
        n = 0
        for a, b in zip(self.ids, ids):  # noqa: B905 - lengths differ by design
            if a != b:
                break
            n += 1
        n = min(n, len(ids) - 1, self.seq.length)  # at least one token to get logits from
        self.seq.truncate(n)
        self.ids = self.ids[:n]
        logits = self.runner.forward(np.asarray(ids[n:]), self.seq)
        self.ids = list(ids)
        return logits, n

    def step(self, token: int) -> np.ndarray:
        logits = self.runner.forward(np.asarray([token]), self.seq)
        self.ids.append(int(token))
        return logits

    def greedy(self, token: int, k: int, eos: set[int], sampling: object = None) -> list[int]:
        """Up to ``k`` tokens after ``token``, chosen on the device (cut after eos): greedy,
        or drawn with the runner's ``sampling`` (from its ``device_sampling``)."""
        extra = {} if sampling is None else {"sampling": sampling}
        out = self.runner.decode_greedy(int(token), self.seq, k, eos=eos, **extra)
        self.ids += [int(token), *out[:-1]]  # the tokens whose rows the cache now holds
        return out

    @property
    def length(self) -> int:
        return 0 if self.seq is None else self.seq.length

    def close(self) -> None:
        if self.seq is not None:
            self.seq.close()
        self.seq, self.ids = None, []

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _device_sampling(runner, params: SamplingParams, step: TokenStep) -> object | None:
    """The runner's settings for drawing ``params``' tokens on the device (its
    ``device_sampling``), or None (greedy, or a runner without it). The
    device draws are seeded by the seed and the position: the same seed gives the same
    tokens on that device, not the host sampler's (another random stream). Without a
    seed, one is drawn from the step's own generator."""
    make = getattr(runner, "device_sampling", None)
    if params.temperature == 0 or make is None:
        return None
    seed = params.seed if params.seed is not None else int(step.sampler.rng.integers(1 << 62))
    return make(params.temperature, params.top_k, params.top_p, params.min_p, seed)


def generate_steps(
    runner,
    prompt_ids: Sequence[int],
    params: SamplingParams,
    *,
    eos_ids: Sequence[int] = (),
    stats: GenerationStats | None = None,
    session: Session | None = None,
    processors: Sequence[TokenProcessor] = (),
    decode: Callable[[list[int]], str] | None = None,
) -> Iterator[Step]:
    """Prefill, then one ``TokenStep`` (``model/step.py``) per token; yields each ``Step``.

    With ``decode`` the steps carry text pieces and a stop string ends the
    generation. A prompt longer than the context raises ``ContextLengthError``;
    reaching the context while generating ends with ``finish_reason="context"``.
    With a ``session`` the KV cache survives the call and its shared prefix is
    reused. ``stats`` is filled as it goes.
    """
    stats = stats if stats is not None else GenerationStats()
    ids = [int(t) for t in prompt_ids]
    if not ids:
        raise ContextLengthError("the prompt is empty: nothing to condition on (add a BOS token)")
    own = session is None
    sess = Session(runner) if own else session
    try:
        if len(ids) >= sess.max_len:
            raise ContextLengthError(
                f"prompt of {len(ids)} tokens does not fit the context of {sess.max_len} tokens"
            )
        stats.prompt_tokens = len(ids)
        step = TokenStep(
            params, ids, eos_ids=eos_ids, processors=processors, decode=decode, stats=stats
        )
        # without penalties or processors, the runner's ``decode_greedy`` (if any) picks
        # DEVICE_TOKENS tokens a launch on the device, the step only takes them
        device = (
            params.repeat_penalty == 1.0
            and not processors
            and getattr(runner, "decode_greedy", None) is not None
        )
        sampling = _device_sampling(runner, params, step) if device else None
        on_device = device and (params.temperature == 0 or sampling is not None)
        stats.token_path = "device" if on_device else "host"
        pending: list[int] = []  # tokens the device chose, not handed to the step yet
        t0 = time.perf_counter()
        logits, stats.cached_tokens = sess.prefill(ids)
        stats.prompt_s = time.perf_counter() - t0
        while True:
            chosen = pending.pop(0) if pending else None
            # the cache is ahead of ``chosen`` by the rows of the device tokens after it
            held = sess.length - len(pending)
            out = step(logits, room=held + 1 <= sess.max_len, token=chosen)
            if out.token is not None or out.piece:
                yield out
            if out.finish:
                return
            if pending:  # the device already decoded this token's successor
                continue
            t0 = time.perf_counter()
            if on_device:
                k = min(
                    DEVICE_TOKENS,
                    params.max_tokens - stats.generated_tokens,
                    sess.max_len - sess.length,
                )
                pending = sess.greedy(out.token, k, step.eos, sampling)
                stats.decode_steps += len(pending)
            else:
                logits = sess.step(out.token)
                stats.decode_steps += 1
            stats.decode_s += time.perf_counter() - t0
    finally:
        if own:
            sess.close()


def generate_tokens(
    runner,
    prompt_ids: Sequence[int],
    params: SamplingParams,
    *,
    eos_ids: Sequence[int] = (),
    stats: GenerationStats | None = None,
    session: Session | None = None,
    processors: Sequence[TokenProcessor] = (),
) -> Iterator[int]:
    """Yield up to ``params.max_tokens`` sampled ids (eos excluded); fills ``stats`` as it goes.

    ``processors`` (``model/processors.py``) see every step's logits before
    sampling and the sampled token after; one that is ``done`` ends the
    sequence with ``finish_reason="stop"``. The rest as ``generate_steps``.
    """
    steps = generate_steps(
        runner,
        prompt_ids,
        params,
        eos_ids=eos_ids,
        stats=stats,
        session=session,
        processors=processors,
    )
    try:
        for out in steps:
            if out.token is not None:
                yield out.token
    finally:
        steps.close()


def stream_text(
    token_stream: Iterator[int],
    decode: Callable[[list[int]], str],
    prompt_ids: Sequence[int],
    stops: Sequence[str],
    stats: GenerationStats,
) -> Iterator[str]:
    """Turn sampled ids into text pieces (``TextPieces``); sets ``stats.finish_reason``
    to ``"stop"`` at a stop string."""
    pieces = TextPieces(decode, prompt_ids, stops)
    try:
        for tok in token_stream:
            out = pieces.feed(tok)
            if out:
                yield out
            if pieces.stopped:
                stats.finish_reason = "stop"
                return
        tail = pieces.finish()
        if pieces.stopped:
            stats.finish_reason = "stop"
        if tail:
            yield tail
    finally:
        close = getattr(token_stream, "close", None)
        if close:
            close()
