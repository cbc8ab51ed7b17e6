"""Per-sequence token processors: the hook between a step's logits and its sampled token.

A generation loop (``generate_tokens``, the server's scheduler) calls, for each
sequence and each step: ``logits = p.process(logits)`` for every processor in
order, samples a token from the result, then ``p.accept(token, raw_logits)``
with the logits as the model produced them, and ends the sequence when any
``p.done``. Structured output (``model/structured.py``) masks tokens this way;
:class:`LogprobRecorder` only watches.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

import numpy as np


@runtime_checkable
class TokenProcessor(Protocol):
    """What a per-sequence processor offers the generation loop."""

    def process(self, logits: np.ndarray) -> np.ndarray:
        """The logits to sample from (may be ``logits`` itself; never modified in place)."""
        ...

    def accept(self, token: int, logits: np.ndarray) -> None:
        """The token sampled this step, and the model's unprocessed logits of the step."""
        ...

    @property
    def done(self) -> bool:
        """True when the sequence must end now (finish reason ``stop``)."""
        ...


def apply_processors(processors: Sequence[TokenProcessor], logits: np.ndarray) -> np.ndarray:
    for p in processors:
        logits = p.process(logits)
    return logits


def accept_token(processors: Sequence[TokenProcessor], token: int, raw: np.ndarray) -> bool:
    """Tell every processor the sampled token; True when one of them ends the sequence."""
    for p in processors:
        p.accept(token, raw)
    return any(p.done for p in processors)


def log_softmax(logits: np.ndarray) -> np.ndarray:
    x = np.asarray(logits, dtype=np.float64).reshape(-1)
    x = x - np.max(x)
    return x - np.log(np.sum(np.exp(x)))


@dataclass
class TokenLogprob:
    token: int
    logprob: float
    top: list[tuple[int, float]] = field(default_factory=list)


class LogprobRecorder:
    """Records each sampled token's log-probability under the model (temperature 1,
    before any mask) and the ``top_n`` most likely tokens of the step."""

    def __init__(self, top_n: int = 0) -> None:
        self.top_n = top_n
        self.entries: list[TokenLogprob] = []

    def process(self, logits: np.ndarray) -> np.ndarray:
        return logits

    def accept(self, token: int, logits: np.ndarray) -> None:
        lp = log_softmax(logits)
        top: list[tuple[int, float]] = []
        if self.top_n:
            k = min(self.top_n, lp.size)
            best = np.argpartition(-lp, k - 1)[:k]
            best = best[np.argsort(-lp[best], kind="stable")]
            top = [(int(i), float(lp[i])) for i in best]
        self.entries.append(TokenLogprob(int(token), float(lp[token]), top))

    @property
    def done(self) -> bool:
        return False
