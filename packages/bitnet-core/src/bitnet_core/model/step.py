"""One sequence's per-token step: the rules every generation loop applies to a step's logits.

``generate_tokens`` (the library, ``bitnet run``/``chat``) and the server's
scheduler both call :class:`TokenStep` once per sampled token, so logits
processors, sampling (penalties included), the end rules (end token, stop
string, a processor that is done, ``max_tokens``, the context) and the text
pieces are written once.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from .processors import TokenProcessor, accept_token, apply_processors
from .sampling import Sampler, SamplingParams
from .stats import GenerationStats
from .text import TextPieces


@dataclass(frozen=True)
class Step:
    """What one step gives: the sampled token (None when the step ended on an end token or
    ``max_tokens`` 0), the text it completes, and the finish reason ("" to go on)."""

    token: int | None
    piece: str = ""
    finish: str = ""  # "stop" (end token, stop string, processor), "length", "context"


class TokenStep:
    """The per-token rules of one sequence.

    Call it with each step's last-position logits and whether the sequence has
    room for one more token; it applies the ``processors`` (``model/processors.py``),
    samples (``Sampler``: temperature, top-k/p, min-p, repeat penalty), tells the
    processors the token, counts it in ``stats`` and, with ``decode``, turns it
    into text pieces cut at the first stop string (``TextPieces``). A finishing
    step carries the held-back text and sets ``stats.finish_reason``.
    """

    def __init__(
        self,
        params: SamplingParams,
        prompt_ids: Sequence[int],
        *,
        eos_ids: Sequence[int] = (),
        processors: Sequence[TokenProcessor] = (),
        decode: Callable[[list[int]], str] | None = None,
        stats: GenerationStats | None = None,
    ) -> None:
        self.params = params
        self.sampler = Sampler(params)
        self.history = [int(t) for t in prompt_ids]
        self.eos = frozenset(int(e) for e in eos_ids)
        self.processors = tuple(processors)
        self.stats = stats if stats is not None else GenerationStats()
        self.text = TextPieces(decode, self.history, params.stop) if decode else None

    def _end(self, token: int | None, piece: str, reason: str) -> Step:
        if self.text is not None:
            piece += self.text.finish()
            if self.text.stopped:
                reason = "stop"
        self.stats.finish_reason = reason
        return Step(token, piece, reason)

    def __call__(
        self, logits: np.ndarray | None, room: bool = True, token: int | None = None
    ) -> Step:
        """The step for ``logits``; ``room``: the sequence can take the sampled token.
        ``token``: one already chosen greedily on the device (no processors), taken as sampled."""
        stats = self.stats
        if stats.generated_tokens >= self.params.max_tokens:  # max_tokens 0: the prompt only
            return self._end(None, "", "length")
        if token is not None:
            tok, done = int(token), False
        else:
            raw = logits
            if self.processors:
                logits = apply_processors(self.processors, logits)
            tok = self.sampler.sample(logits, self.history)
            done = bool(self.processors) and accept_token(self.processors, tok, raw)
        if tok in self.eos:
            return self._end(None, "", "stop")
        self.history.append(tok)
        stats.generated_tokens += 1
        piece = self.text.feed(tok) if self.text is not None else ""
        if done or (self.text is not None and self.text.stopped):
            return self._end(tok, piece, "stop")
        if stats.generated_tokens >= self.params.max_tokens:
            return self._end(tok, piece, "length")
        if not room:
            return self._end(tok, piece, "context")
        return Step(tok, piece)
