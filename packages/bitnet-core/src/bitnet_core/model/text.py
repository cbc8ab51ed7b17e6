"""Generated ids to streamed text, one id at a time, cut at the first stop string."""

from __future__ import annotations

import bisect
from collections.abc import Callable, Sequence

from .sampling import StopMatcher


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
