"""Choosing the next token from host logits (numpy): greedy, temperature, top-k,
top-p, min-p, repetition penalty, seeded; and stop strings.

Order of the steps (as llama.cpp's default chain): repetition penalty over
the last ``repeat_last_n`` tokens (positive logits divided, negative
multiplied, as llama.cpp and CTRL), then ``temperature == 0`` means greedy
(argmax); else top-k, softmax at ``temperature``, top-p (smallest set whose
mass reaches ``top_p``), min-p (drop tokens below ``min_p`` times the most
likely one's probability), renormalize, draw with a ``numpy`` generator
seeded by ``seed``: the same seed gives the same tokens.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field

import numpy as np

from ..errors import ConfigError


def _is_int(v: object) -> bool:
    return isinstance(v, (int, np.integer)) and not isinstance(v, bool)


@dataclass(frozen=True)
class SamplingParams:
    """Sampling settings; out-of-range values raise ``ConfigError``."""

    temperature: float = 0.8
    top_k: int = 40  # 0: off
    top_p: float = 0.95  # 1.0: off
    min_p: float = 0.05  # 0.0: off
    repeat_penalty: float = 1.0  # 1.0: off
    repeat_last_n: int = 64
    seed: int | None = None
    max_tokens: int = 128
    stop: tuple[str, ...] = field(default_factory=tuple)

    def __post_init__(self) -> None:
        def bad(name: str, want: str) -> ConfigError:
            return ConfigError(f"sampling: {name} must be {want}, got {getattr(self, name)!r}")

        def num(name: str) -> float:
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float, np.number)):
                raise bad(name, "a number")
            if not math.isfinite(float(v)):
                raise bad(name, "finite")
            return float(v)

        if num("temperature") < 0:
            raise bad("temperature", ">= 0")
        if not _is_int(self.top_k) or self.top_k < 0:
            raise bad("top_k", "an integer >= 0")
        if not 0.0 < num("top_p") <= 1.0:
            raise bad("top_p", "in (0, 1]")
        if not 0.0 <= num("min_p") <= 1.0:
            raise bad("min_p", "in [0, 1]")
        if num("repeat_penalty") <= 0:
            raise bad("repeat_penalty", "> 0")
        if not _is_int(self.repeat_last_n) or self.repeat_last_n < 0:
            raise bad("repeat_last_n", "an integer >= 0")
        if self.seed is not None and (not _is_int(self.seed) or self.seed < 0):
            raise bad("seed", "an integer >= 0 or None")
        if not _is_int(self.max_tokens) or self.max_tokens < 0:
            raise bad("max_tokens", "an integer >= 0")
        stop = (self.stop,) if isinstance(self.stop, str) else tuple(self.stop or ())
        if any(not isinstance(s, str) or not s for s in stop):
            raise ConfigError(f"sampling: stop strings must be non-empty strings, got {stop!r}")
        object.__setattr__(self, "stop", stop)

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    @classmethod
    def from_kwargs(cls, **kwargs: object) -> SamplingParams:
        """Build from keyword arguments; unknown names raise ``ConfigError``."""
        known = set(cls.__dataclass_fields__)
        unknown = sorted(set(kwargs) - known)
        if unknown:
            raise ConfigError(
                f"sampling: unknown option(s) {', '.join(unknown)} (known: {', '.join(sorted(known))})"
            )
        return cls(**{k: v for k, v in kwargs.items() if v is not None})

    def as_dict(self) -> dict:
        d = asdict(self)
        d["stop"] = list(self.stop)
        return d


def apply_repetition_penalty(
    logits: np.ndarray, history: Sequence[int], penalty: float, last_n: int
) -> np.ndarray:
    """llama.cpp's penalty: each recent token's logit divided by ``penalty`` if > 0, else multiplied."""
    if penalty == 1.0 or last_n == 0 or not len(history):
        return logits
    recent = np.unique(np.asarray(history[-last_n:], dtype=np.int64))
    recent = recent[(recent >= 0) & (recent < logits.shape[0])]
    out = logits.copy()
    vals = out[recent]
    out[recent] = np.where(vals > 0, vals / penalty, vals * penalty)
    return out


def _nucleus_order(z: np.ndarray, p: np.ndarray, top_p: float) -> tuple[np.ndarray, np.ndarray]:
    """The tokens by logit (ties broken as argmax does) and their cumulative
    probabilities, as far as top-p needs them: a prefix of that order whose sum
    reaches ``top_p``, or all tokens of non-zero probability (the others add nothing).

    Sorting the whole vocabulary for each token cost milliseconds; this sorts the
    tokens above a threshold (all of them at or above it, so ties at the edge stay
    whole and the prefix is exactly the full order's), four times as many until
    their sum reaches ``top_p``.
    """
    live = np.flatnonzero(p > 0)  # after top-k, a few dozen of the vocabulary
    zl = z[live]
    m = 256
    while m < live.size:
        top = live[zl >= np.partition(zl, live.size - m)[live.size - m]]
        order = top[np.argsort(-z[top], kind="stable")]
        cum = np.cumsum(p[order])
        if cum[-1] >= top_p:
            return order, cum
        m *= 4
    order = live[np.argsort(-z[live], kind="stable")]
    return order, np.cumsum(p[order])


def token_probabilities(logits: np.ndarray, params: SamplingParams) -> np.ndarray:
    """The distribution a non-greedy draw samples from (after top-k, temperature, top-p, min-p)."""
    x = np.asarray(logits, dtype=np.float64)
    n = x.shape[0]
    keep = np.ones(n, dtype=bool)
    if 0 < params.top_k < n:
        kth = np.partition(x, n - params.top_k)[n - params.top_k]
        keep &= x >= kth
    z = np.where(keep, x / params.temperature, -np.inf)
    z -= z.max()
    p = np.zeros(n)
    kept = np.flatnonzero(keep)  # exp only where it is not exp(-inf) = 0: top-k keeps a few
    p[kept] = np.exp(z[kept])
    p /= p.sum()
    if params.top_p < 1.0:
        order, cum = _nucleus_order(z, p, params.top_p)
        # keep the smallest prefix whose mass reaches top_p (at least one token)
        cut = int(np.searchsorted(cum, params.top_p)) + 1
        mask = np.zeros(n, dtype=bool)
        mask[order[:cut]] = True
        p = np.where(mask, p, 0.0)
    if params.min_p > 0.0:
        p = np.where(p >= params.min_p * p.max(), p, 0.0)
    return p / p.sum()


class Sampler:
    """Draws tokens for one generation; holds the seeded random generator."""

    def __init__(self, params: SamplingParams) -> None:
        self.params = params
        self.rng = np.random.default_rng(params.seed)

    def sample(self, logits: np.ndarray, history: Sequence[int] = ()) -> int:
        logits = np.asarray(logits, dtype=np.float32).reshape(-1)
        p = self.params
        if p.greedy and p.repeat_penalty == 1.0 and logits.size:
            # one pass where the largest logit is finite: argmax would have stopped at a
            # NaN or +inf, so there is none and the checks below change nothing
            best = int(np.argmax(logits))
            if np.isfinite(logits[best]):
                return best
        if not np.isfinite(logits).any():
            raise ConfigError("sampling: every logit is NaN or infinite")
        logits = np.where(np.isnan(logits), -np.inf, logits)
        logits = apply_repetition_penalty(logits, history, p.repeat_penalty, p.repeat_last_n)
        if p.greedy:
            return int(np.argmax(logits))
        top = np.isposinf(logits)
        if top.any():  # softmax's limit: the +inf tokens share all of the probability
            logits = np.where(top, 0.0, -np.inf).astype(np.float32)
        return self._draw(token_probabilities(logits, p))

    def _draw(self, probs: np.ndarray) -> int:
        """A token drawn from ``probs``: ``Generator.choice(n, p=probs)``'s own inverse-CDF
        draw (one ``random()``, the first index whose cumulative probability passes it,
        so the same token for the same seed), over the tokens of non-zero probability
        only (the others add nothing to the cumulative sums) and without its checks."""
        live = np.flatnonzero(probs > 0)
        cdf = np.cumsum(probs[live])
        cdf /= cdf[-1]
        return int(live[np.searchsorted(cdf, self.rng.random(), side="right")])


class StopMatcher:
    """Cuts streamed text at the first stop string, holding back what might begin one."""

    def __init__(self, stops: Iterable[str]) -> None:
        self.stops = tuple(stops)
        self._buf = ""
        self.stopped = False

    def _first_hit(self) -> int:
        hits = [i for i in (self._buf.find(s) for s in self.stops) if i >= 0]
        return min(hits) if hits else -1

    def _first_pending(self) -> int:
        """Where the earliest unfinished match (the buffer's tail begins a stop string) starts."""
        n = len(self._buf)
        longest = max(len(s) for s in self.stops)
        for j in range(max(0, n - longest + 1), n):
            tail = self._buf[j:]
            if any(len(s) > len(tail) and s.startswith(tail) for s in self.stops):
                return j
        return n

    def feed(self, text: str) -> str:
        """Text that is safe to emit now (empty once a stop string was seen)."""
        if self.stopped:
            return ""
        self._buf += text
        if not self.stops:
            out, self._buf = self._buf, ""
            return out
        hit, pending = self._first_hit(), self._first_pending()
        if hit >= 0 and hit <= pending:  # no earlier stop string can still complete
            self.stopped = True
            out, self._buf = self._buf[:hit], ""
            return out
        cut = pending if hit < 0 else min(pending, hit)
        out, self._buf = self._buf[:cut], self._buf[cut:]
        return out

    def flush(self) -> str:
        """The held-back text at the end of generation (cut at a stop string it holds)."""
        if self.stopped:
            return ""
        hit = self._first_hit() if self.stops else -1
        if hit >= 0:
            self.stopped = True
        out, self._buf = (self._buf[:hit] if hit >= 0 else self._buf), ""
        return out
