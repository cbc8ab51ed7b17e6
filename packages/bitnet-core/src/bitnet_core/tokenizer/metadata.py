"""The GGUF tokenizer keys (``tokenizer.ggml.*``) and a validated view of them.

The keys and token types are llama.cpp's (``gguf-py/gguf/constants.py``,
``src/llama-vocab.cpp``); :class:`VocabSpec` reads them from a metadata dict
(plain Python values, lists or numpy arrays) and raises :class:`TokenizerError`
naming the key when one is missing or malformed. The defaults it applies when a
key is absent are llama.cpp's (``llama_vocab::impl::load``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import IntEnum

import numpy as np

from ..errors import TokenizerError

KEY_MODEL = "tokenizer.ggml.model"
KEY_PRE = "tokenizer.ggml.pre"
KEY_TOKENS = "tokenizer.ggml.tokens"
KEY_SCORES = "tokenizer.ggml.scores"
KEY_TOKEN_TYPE = "tokenizer.ggml.token_type"
KEY_MERGES = "tokenizer.ggml.merges"
KEY_BOS_ID = "tokenizer.ggml.bos_token_id"
KEY_EOS_ID = "tokenizer.ggml.eos_token_id"
KEY_UNK_ID = "tokenizer.ggml.unknown_token_id"
KEY_PAD_ID = "tokenizer.ggml.padding_token_id"
KEY_EOT_ID = "tokenizer.ggml.eot_token_id"
KEY_ADD_BOS = "tokenizer.ggml.add_bos_token"
KEY_ADD_EOS = "tokenizer.ggml.add_eos_token"
KEY_ADD_PREFIX = "tokenizer.ggml.add_space_prefix"
KEY_CHAT_TEMPLATE = "tokenizer.chat_template"


class TokenType(IntEnum):
    """The token types llama.cpp stores in ``tokenizer.ggml.token_type``."""

    NORMAL = 1
    UNKNOWN = 2
    CONTROL = 3
    USER_DEFINED = 4
    UNUSED = 5
    BYTE = 6


SUPPORTED_MODELS = ("gpt2", "llama")

#: Default special token ids of llama.cpp when the file names none.
_DEFAULT_SPECIAL = {"llama": (1, 2, 0), "gpt2": (11, 11, None)}  # bos, eos, unk


def _strings(value: object, key: str) -> list[str]:
    if isinstance(value, (str, bytes)) or not isinstance(value, (Sequence, np.ndarray)):
        raise TokenizerError(f"tokenizer metadata: {key} must be an array of strings")
    if isinstance(value, list) and set(map(type, value)) <= {str}:
        return value  # what the GGUF reader gives: checked at C speed (128k tokens)
    out = []
    for item in value:
        if isinstance(item, bytes):
            try:
                item = item.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise TokenizerError(f"tokenizer metadata: {key} holds invalid UTF-8") from exc
        if not isinstance(item, str):
            raise TokenizerError(f"tokenizer metadata: {key} must be an array of strings")
        out.append(item)
    return out


def _numbers(value: object, key: str, n: int, kind: type) -> list:
    try:
        arr = np.asarray(value)
    except Exception as exc:  # pragma: no cover - numpy accepts nearly anything
        raise TokenizerError(f"tokenizer metadata: {key} is not an array") from exc
    if arr.ndim != 1 or arr.dtype.kind not in ("i", "u", "f") or len(arr) < n:
        raise TokenizerError(
            f"tokenizer metadata: {key} must be a numeric array of at least {n} entries"
        )
    if kind is int and arr.dtype.kind == "f":
        raise TokenizerError(f"tokenizer metadata: {key} must hold integers")
    return arr[:n].astype(np.int64 if kind is int else np.float64).tolist()


def _scalar_id(meta: Mapping, key: str, default: int | None, n: int) -> int | None:
    if key not in meta:
        return default if default is not None and default < n else None
    value = meta[key]
    if isinstance(value, (np.ndarray, list, tuple)) and np.size(value) == 1:
        value = np.asarray(value).reshape(-1)[0].item()
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TokenizerError(f"tokenizer metadata: {key} must be an integer")
    value = int(value)
    # llama.cpp ignores an out-of-range id and keeps its default.
    if not 0 <= value < n:
        return default if default is not None and default < n else None
    return value


def _flag(meta: Mapping, key: str, default: bool) -> bool:
    if key not in meta:
        return default
    value = meta[key]
    if isinstance(value, (np.ndarray, list, tuple)) and np.size(value) == 1:
        value = np.asarray(value).reshape(-1)[0].item()
    if not isinstance(value, (bool, np.bool_, int, np.integer)):
        raise TokenizerError(f"tokenizer metadata: {key} must be a boolean")
    return bool(value)


def _text(meta: Mapping, key: str) -> str | None:
    value = meta.get(key)
    if value is None:
        return None
    if isinstance(value, bytes):
        value = value.decode("utf-8", errors="replace")
    if not isinstance(value, str):
        raise TokenizerError(f"tokenizer metadata: {key} must be a string")
    return value


@dataclass(frozen=True)
class VocabSpec:
    """The tokenizer metadata of one GGUF file, validated."""

    model: str
    tokens: list[str]
    token_types: list[int]
    scores: list[float]
    merges: list[tuple[str, str]] = field(default_factory=list)
    pre: str | None = None
    bos_id: int | None = None
    eos_id: int | None = None
    unk_id: int | None = None
    eot_id: int | None = None
    add_bos: bool | None = None  # None: the pre-tokenizer's default
    add_eos: bool = False
    add_space_prefix: bool = True
    chat_template: str | None = None

    @classmethod
    def from_metadata(cls, meta: Mapping) -> VocabSpec:
        if not isinstance(meta, Mapping):
            raise TokenizerError("tokenizer metadata must be a mapping of GGUF keys")
        model = _text(meta, KEY_MODEL)
        if model is None:
            raise TokenizerError(f"tokenizer metadata: {KEY_MODEL} is missing")
        if model not in SUPPORTED_MODELS:
            raise TokenizerError(
                f"tokenizer metadata: {KEY_MODEL} {model!r} is not supported "
                f"(supported: {', '.join(SUPPORTED_MODELS)})"
            )
        if KEY_TOKENS not in meta:
            raise TokenizerError(f"tokenizer metadata: {KEY_TOKENS} is missing")
        tokens = _strings(meta[KEY_TOKENS], KEY_TOKENS)
        n = len(tokens)
        if n == 0:
            raise TokenizerError(f"tokenizer metadata: {KEY_TOKENS} is empty")
        # llama.cpp renames empty tokens so that every text is a distinct key.
        if "" in tokens:
            tokens = [t if t else f"[EMPTY_{i}]" for i, t in enumerate(tokens)]
        if len(set(tokens)) != n:  # (the loop only to name the first duplicate)
            seen: dict[str, int] = {}
            for i, t in enumerate(tokens):
                if t in seen:
                    raise TokenizerError(
                        f"tokenizer metadata: duplicate token {t!r} (ids {seen[t]} and {i})"
                    )
                seen[t] = i
        token_types = (
            _numbers(meta[KEY_TOKEN_TYPE], KEY_TOKEN_TYPE, n, int)
            if KEY_TOKEN_TYPE in meta
            else [int(TokenType.NORMAL)] * n
        )
        scores = (
            _numbers(meta[KEY_SCORES], KEY_SCORES, n, float) if KEY_SCORES in meta else [0.0] * n
        )
        merges: list[tuple[str, str]] = []
        if model == "gpt2":
            if KEY_MERGES not in meta:
                raise TokenizerError(f"tokenizer metadata: {KEY_MERGES} is missing (gpt2 BPE)")
            for m in _strings(meta[KEY_MERGES], KEY_MERGES):
                pos = m.find(" ", 1)  # as llama.cpp: the first space after index 0
                if pos < 0:
                    raise TokenizerError(f"tokenizer metadata: malformed merge {m!r}")
                merges.append((m[:pos], m[pos + 1 :]))
        bos, eos, unk = _DEFAULT_SPECIAL[model]
        return cls(
            model=model,
            tokens=tokens,
            token_types=token_types,
            scores=scores,
            merges=merges,
            pre=_text(meta, KEY_PRE),
            bos_id=_scalar_id(meta, KEY_BOS_ID, bos, n),
            eos_id=_scalar_id(meta, KEY_EOS_ID, eos, n),
            unk_id=_scalar_id(meta, KEY_UNK_ID, unk, n),
            eot_id=_scalar_id(meta, KEY_EOT_ID, None, n),
            add_bos=_flag(meta, KEY_ADD_BOS, False) if KEY_ADD_BOS in meta else None,
            add_eos=_flag(meta, KEY_ADD_EOS, False),
            add_space_prefix=_flag(meta, KEY_ADD_PREFIX, model == "llama"),
            chat_template=_text(meta, KEY_CHAT_TEMPLATE),
        )
