"""Incremental detokenization: token ids in, text pieces out, never half a character."""

from __future__ import annotations

import codecs
from collections.abc import Iterable
from typing import Protocol


class Detokenizer(Protocol):
    """What ``StreamDecoder`` needs of a tokenizer (``core.Tokenizer`` has it)."""

    @property
    def strips_prefix_space(self) -> bool: ...

    def token_bytes(self, token_id: int, *, special: bool = False) -> bytes: ...

    def decode(self, ids: Iterable[int], skip_special: bool = True) -> str: ...


class StreamDecoder:
    """Turn a stream of token ids into text pieces.

    ``feed(id)`` returns the text that became complete with this token (maybe
    ``""`` while a multi-byte UTF-8 character is still incomplete, as when a
    byte-level vocabulary splits an emoji over tokens); ``flush()`` returns what
    is left (an unfinished character as U+FFFD). The concatenation of all pieces
    equals ``tokenizer.decode(ids)`` (with ``strip_prefix_space`` matching).

    ``strip_prefix_space``: drop the leading space of the first piece, as
    ``decode`` does for SentencePiece vocabularies; leave it ``False`` when the
    ids continue a prompt (a generated ``▁Hello`` is `` Hello``).
    """

    def __init__(
        self, tokenizer: Detokenizer, *, skip_special: bool = True, strip_prefix_space: bool = False
    ) -> None:
        self.tokenizer = tokenizer
        self.skip_special = skip_special
        self._strip = strip_prefix_space and tokenizer.strips_prefix_space
        self._utf8 = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._started = False

    def _emit(self, text: str) -> str:
        if not self._started and text:
            self._started = True
            if self._strip and text.startswith(" "):
                text = text[1:]
        return text

    def feed(self, token_id: int) -> str:
        """Add one token; return the text completed by it."""
        data = self.tokenizer.token_bytes(int(token_id), special=not self.skip_special)
        return self._emit(self._utf8.decode(data))

    def flush(self) -> str:
        """End of stream: return any remaining text."""
        text = self._emit(self._utf8.decode(b"", final=True))
        self._utf8.reset()
        return text
