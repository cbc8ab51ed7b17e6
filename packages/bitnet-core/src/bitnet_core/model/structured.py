"""Structured output: token masks from a JSON schema or grammar, with ``llguidance``.

``JsonConstraint`` is a :class:`~bitnet_core.model.processors.TokenProcessor`:
each step it asks llguidance which tokens may come next, sets every other
logit to -inf, and feeds it the sampled token; once the grammar is complete
only end-of-generation is allowed and the sequence ends. ``llguidance`` is the
``structured`` extra: ``pip install 'bitnet-core[structured]'``.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from ..errors import ConfigError


def _llguidance() -> Any:
    try:
        import llguidance
    except ImportError as exc:
        raise ConfigError(
            "structured output needs llguidance: pip install 'bitnet-core[structured]'"
        ) from exc
    return llguidance


class _Vocabulary:
    """Our tokenizer in the shape llguidance's ``TokenizerWrapper`` reads."""

    def __init__(self, tokenizer: Any, n_vocab: int, eos_ids: list[int]) -> None:
        self._tok = tokenizer
        self.eos_token_id = eos_ids[0] if eos_ids else tokenizer.eos_id
        self.bos_token_id = tokenizer.bos_id
        tokens: list[bytes] = []
        self.special_token_ids: list[int] = []
        for i in range(n_vocab):
            if i >= tokenizer.vocab_size:
                tokens.append(b"")
                continue
            if tokenizer.is_special(i):
                # llguidance's mark for a special token (as its llama.cpp adapter writes it)
                tokens.append(b"\xff" + tokenizer.token_text(i).encode("utf-8"))
                self.special_token_ids.append(i)
            else:
                tokens.append(tokenizer.token_bytes(i))
        self.tokens = tokens

    def __call__(self, text: str) -> list[int]:
        return self._tok.encode(text, add_bos=False)


def guidance_tokenizer(tokenizer: Any, n_vocab: int, eos_ids: list[int]) -> Any:
    """The ``llguidance.LLTokenizer`` of ``tokenizer`` for logits of width ``n_vocab``.

    Building it reads every token (about a second for 128k tokens): build it
    once per model and share it between requests.
    """
    llg = _llguidance()
    vocab = _Vocabulary(tokenizer, n_vocab, eos_ids)
    return llg.LLTokenizer(
        llg.TokenizerWrapper(vocab), n_vocab=n_vocab, eos_token=list(eos_ids) or None
    )


#: JSON on one line with the usual separators: free whitespace would let a model
#: pad forever instead of closing the object. A schema's ``x-guidance`` overrides it.
JSON_STYLE = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}


def json_grammar(schema: dict | None) -> str:
    """The llguidance grammar of a JSON schema (None: any JSON object); ``ConfigError`` if bad."""
    llg = _llguidance()
    if schema is None:
        schema = {"type": "object"}
    if not isinstance(schema, dict):
        raise ConfigError("a JSON schema must be a JSON object")
    try:
        return llg.LLMatcher.grammar_from_json_schema(json.dumps(schema), defaults=JSON_STYLE)
    except ValueError as exc:
        raise ConfigError(f"bad JSON schema: {exc}") from exc


class JsonConstraint:
    """Masks every token that cannot continue ``grammar``; ends the sequence when it is complete."""

    def __init__(self, lltokenizer: Any, grammar: str) -> None:
        llg = _llguidance()
        error = llg.LLMatcher.validate_grammar(grammar, lltokenizer)
        if error:
            raise ConfigError(f"the schema cannot be used: {error}")
        self._matcher = llg.LLMatcher(lltokenizer, grammar, log_level=0)
        if self._matcher.is_error():
            raise ConfigError(f"the schema cannot be used: {self._matcher.get_error()}")
        self._n_vocab = lltokenizer.vocab_size
        self._bits = np.zeros((1, (self._n_vocab + 31) // 32), dtype=np.int32)

    def process(self, logits: np.ndarray) -> np.ndarray:
        from llguidance.numpy import fill_next_token_bitmask

        fill_next_token_bitmask(self._matcher, self._bits)
        self._check()
        allowed = np.unpackbits(self._bits.view(np.uint8), bitorder="little")
        allowed = allowed[: logits.shape[-1]].astype(bool)
        if allowed.size < logits.shape[-1]:  # logits wider than the tokenizer: never allowed
            allowed = np.pad(allowed, (0, logits.shape[-1] - allowed.size))
        return np.where(allowed, logits, np.float32(-np.inf)).astype(logits.dtype, copy=False)

    def accept(self, token: int, logits: np.ndarray) -> None:
        self._matcher.consume_token(int(token))
        self._check()

    def _check(self) -> None:
        if self._matcher.is_error():
            raise ConfigError(f"structured output: {self._matcher.get_error()}")

    @property
    def done(self) -> bool:
        return self._matcher.is_stopped()
