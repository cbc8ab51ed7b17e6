"""The generation loop: prefill the prompt, then sample and decode one token at a time."""

from __future__ import annotations

import bisect
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass

import numpy as np

from ..errors import ContextLengthError
from .processors import TokenProcessor, accept_token, apply_processors
from .sampling import Sampler, SamplingParams, StopMatcher

#: greedy tokens a device launch decodes (``decode_greedy``), when the runner has it
DEVICE_TOKENS = 8


@dataclass
class GenerationStats:
    """Token counts and timings of one generation (or bench run)."""

    prompt_tokens: int = 0
    generated_tokens: int = 0
    prompt_s: float = 0.0
    decode_s: float = 0.0
    decode_steps: int = 0  # forward calls of one token
    cached_tokens: int = 0  # prompt tokens reused from a session's KV cache
    finish_reason: str = ""  # "stop" (eos or stop string), "length", "context"
    #: "device": greedy tokens chosen on the device, DEVICE_TOKENS a launch (the runner's
    #: ``decode_greedy``); "host": logits to the host each step (sampling, penalties,
    #: logit processors, or a runner without it)
    token_path: str = ""

    @property
    def prompt_tokens_per_s(self) -> float:
        return self.prompt_tokens / self.prompt_s if self.prompt_s > 0 else 0.0

    @property
    def decode_tokens_per_s(self) -> float:
        return self.decode_steps / self.decode_s if self.decode_s > 0 else 0.0

    def as_dict(self) -> dict:
        d = asdict(self)
        d.update(
            prompt_tokens_per_s=self.prompt_tokens_per_s,
            decode_tokens_per_s=self.decode_tokens_per_s,
        )
        return d


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

    def greedy(self, token: int, k: int, eos: set[int]) -> list[int]:
        """Up to ``k`` greedy tokens after ``token``, chosen on the device (cut after eos)."""
        out = self.runner.decode_greedy(int(token), self.seq, k, eos=eos)
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
    sequence with ``finish_reason="stop"``.

    A prompt longer than the context raises ``ContextLengthError``; reaching the
    context while generating ends with ``finish_reason="context"``. With a
    ``session`` the KV cache survives the call and its shared prefix is reused.
    """
    stats = stats if stats is not None else GenerationStats()
    ids = [int(t) for t in prompt_ids]
    if not ids:
        raise ContextLengthError("the prompt is empty: nothing to condition on (add a BOS token)")
    sampler = Sampler(params)
    eos = set(int(e) for e in eos_ids)
    on_device = (
        params.temperature == 0
        and params.repeat_penalty == 1.0
        and not processors
        and getattr(runner, "decode_greedy", None) is not None
    )
    stats.token_path = "device" if on_device else "host"
    pending: list[int] = []  # tokens the device chose, not handed out yet
    own = session is None
    sess = Session(runner) if own else session
    try:
        if len(ids) >= sess.max_len:
            raise ContextLengthError(
                f"prompt of {len(ids)} tokens does not fit the context of {sess.max_len} tokens"
            )
        stats.prompt_tokens = len(ids)
        t0 = time.perf_counter()
        logits, stats.cached_tokens = sess.prefill(ids)
        stats.prompt_s = time.perf_counter() - t0
        history = list(ids)
        for n in range(params.max_tokens):
            if pending:
                tok, finished = pending.pop(0), False
            else:
                if processors:
                    raw, logits = logits, apply_processors(processors, logits)
                tok = sampler.sample(logits, history)
                finished = processors and accept_token(processors, tok, raw)
            if tok in eos:
                stats.finish_reason = "stop"
                return
            history.append(tok)
            stats.generated_tokens += 1
            yield tok
            if finished:
                stats.finish_reason = "stop"
                return
            if n + 1 == params.max_tokens:
                break
            if sess.length + 1 > sess.max_len:
                stats.finish_reason = "context"
                return
            if pending:  # the device already decoded this token's successor
                continue
            t0 = time.perf_counter()
            if on_device:
                k = min(DEVICE_TOKENS, params.max_tokens - n - 1, sess.max_len - sess.length)
                pending = sess.greedy(tok, k, eos)
                stats.decode_steps += len(pending)
            else:
                logits = sess.step(tok)
                stats.decode_steps += 1
            stats.decode_s += time.perf_counter() - t0
        stats.finish_reason = "length"
    finally:
        if own:
            sess.close()


class TextPieces:
    """Sampled ids to text pieces, one id at a time: incremental decoding, cut at the
    first stop string.

    Each piece is the new text of ``decode(prompt + generated)`` (so leading
    spaces come out right); a trailing incomplete UTF-8 character waits for
    the next token. ``stopped`` turns true once a stop string was seen.
    ``tokens_shown`` counts the generated tokens whose text is at least partly
    in the pieces handed out (not the ones a stop string cut, nor an end token).

    The new text is found by decoding a window, not the whole sequence (which
    made every token cost as much as the prompt is long): the ids from the last
    point where the text was complete, after the ids before it as context. The
    context has text, ends at a whole character and starts where the window
    does (a space a vocabulary strips at the start of a text goes from both), so
    what follows it in the window is the new text, as decoding everything gives
    it. Where the window's text does not start with the context's, everything
    is decoded from then on.
    """

    #: prompt ids of the first window's context (the whole prompt where they have no text)
    CONTEXT = 4

    def __init__(
        self, decode: Callable[[list[int]], str], prompt_ids: Sequence[int], stops: Sequence[str]
    ) -> None:
        self._decode = decode
        self._ids = list(prompt_ids)
        self._n_prompt = len(self._ids)
        self._base = decode(self._ids)
        self._text = ""  # the generated text so far (may end in an incomplete character)
        self._done = ""  # the generated text up to the end of the window's context
        self._emitted = 0
        self._matcher = StopMatcher(stops)
        self._starts: list[int] = []  # where each generated token's text begins
        self._shown = 0  # characters handed out
        # the window is ids[_lo:], its context ids[_lo:_hi] with text _context
        self._windowed = True
        self._hi = self._n_prompt
        self._lo = max(0, self._hi - self.CONTEXT)
        self._context = decode(self._ids[self._lo : self._hi]) if self._lo else self._base
        if self._lo and (not self._context or self._context.endswith("\ufffd")):
            self._lo, self._context = 0, self._base  # the whole prompt as context

    @property
    def tokens_shown(self) -> int:
        return bisect.bisect_left(self._starts, self._shown)

    def _out(self, piece: str) -> str:
        self._shown += len(piece)
        return piece

    @property
    def stopped(self) -> bool:
        return self._matcher.stopped

    def _generated_text(self) -> tuple[str, str | None]:
        """The generated text, and the window's text (None once everything is decoded)."""
        if self._windowed:
            window = self._decode(self._ids[self._lo :])
            if window.startswith(self._context):
                return self._done + window[len(self._context) :], window
            self._windowed = False
        text = self._decode(self._ids)
        base = self._base
        if text.startswith(base):
            return text[len(base) :], None
        return self._decode(self._ids[self._n_prompt :]), None

    def feed(self, tok: int) -> str:
        """The text that ``tok`` completes (possibly empty)."""
        self._ids.append(tok)
        self._starts.append(len(self._text.rstrip("\ufffd")))
        text, window = self._generated_text()
        self._text = text
        if text.endswith("\ufffd"):
            return ""
        if window is not None:  # complete here: the window so far becomes context
            context = self._decode(self._ids[self._hi :])
            if context:  # the next window starts at the ids since the last context
                self._lo, self._context = self._hi, context
            else:  # they have no text to anchor on: the window grows
                self._context = window
            self._hi, self._done = len(self._ids), text
        piece, self._emitted = text[self._emitted :], len(text)
        return self._out(self._matcher.feed(piece))

    def finish(self) -> str:
        """The held-back text at the end of generation."""
        return self._out(self._matcher.feed(self._text[self._emitted :]) + self._matcher.flush())


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
