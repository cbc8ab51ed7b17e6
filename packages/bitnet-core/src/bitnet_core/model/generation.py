"""The generation loop: prefill the prompt, then sample and decode one token at a time."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass

import numpy as np

from ..errors import ContextLengthError
from .sampling import Sampler, SamplingParams, StopMatcher


@dataclass
class GenerationStats:
    """Token counts and timings of one generation (or bench run)."""

    prompt_tokens: int = 0
    generated_tokens: int = 0
    prompt_s: float = 0.0
    decode_s: float = 0.0
    decode_steps: int = 0  # forward calls of one token
    finish_reason: str = ""  # "stop" (eos or stop string), "length", "context"

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


def generate_tokens(
    backend,
    prompt_ids: Sequence[int],
    params: SamplingParams,
    *,
    eos_ids: Sequence[int] = (),
    stats: GenerationStats | None = None,
) -> Iterator[int]:
    """Yield up to ``params.max_tokens`` sampled ids (eos excluded); fills ``stats`` as it goes.

    A prompt longer than the context raises ``ContextLengthError``; reaching the
    context while generating ends with ``finish_reason="context"``.
    """
    stats = stats if stats is not None else GenerationStats()
    ids = [int(t) for t in prompt_ids]
    if not ids:
        raise ContextLengthError("the prompt is empty: nothing to condition on (add a BOS token)")
    sampler = Sampler(params)
    eos = set(int(e) for e in eos_ids)
    seq = backend.new_cache()
    try:
        if len(ids) >= seq.max_len:
            raise ContextLengthError(
                f"prompt of {len(ids)} tokens does not fit the context of {seq.max_len} tokens"
            )
        stats.prompt_tokens = len(ids)
        t0 = time.perf_counter()
        logits = backend.forward(np.asarray(ids), seq)
        stats.prompt_s = time.perf_counter() - t0
        history = list(ids)
        for n in range(params.max_tokens):
            tok = sampler.sample(logits, history)
            if tok in eos:
                stats.finish_reason = "stop"
                return
            history.append(tok)
            stats.generated_tokens += 1
            yield tok
            if n + 1 == params.max_tokens:
                break
            if seq.length + 1 > seq.max_len:
                stats.finish_reason = "context"
                return
            t0 = time.perf_counter()
            logits = backend.forward(np.asarray([tok]), seq)
            stats.decode_s += time.perf_counter() - t0
            stats.decode_steps += 1
        stats.finish_reason = "length"
    finally:
        seq.close()


def stream_text(
    token_stream: Iterator[int],
    decode: Callable[[list[int]], str],
    prompt_ids: Sequence[int],
    stops: Sequence[str],
    stats: GenerationStats,
) -> Iterator[str]:
    """Turn sampled ids into text pieces: incremental decoding, cut at the first stop string.

    Each piece is the new text of ``decode(prompt + generated)`` (so leading
    spaces come out right); a trailing incomplete UTF-8 character waits for
    the next token.
    """
    prompt = list(prompt_ids)
    base = decode(prompt)
    generated: list[int] = []
    emitted = 0
    text = ""
    matcher = StopMatcher(stops)
    try:
        for tok in token_stream:
            generated.append(tok)
            text = decode(prompt + generated)
            text = text[len(base) :] if text.startswith(base) else decode(generated)
            if text.endswith("\ufffd"):
                continue
            piece, emitted = text[emitted:], len(text)
            out = matcher.feed(piece)
            if out:
                yield out
            if matcher.stopped:
                stats.finish_reason = "stop"
                return
        tail = matcher.feed(text[emitted:]) + matcher.flush()
        if matcher.stopped:
            stats.finish_reason = "stop"
        if tail:
            yield tail
    finally:
        close = getattr(token_stream, "close", None)
        if close:
            close()
