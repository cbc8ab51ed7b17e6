"""Pre-tokenizer regexes of byte-level BPE vocabularies, per ``tokenizer.ggml.pre``.

Copied in meaning from llama.cpp's ``llm_tokenizer_bpe`` (``src/llama-vocab.cpp``):
each pre-tokenizer is a list of regexes applied one after the other, every
regex splitting each piece into its matches and the text between them (both
kept: the "isolated" behaviour of ``tokenizers.pre_tokenizers.Split``). Where
llama.cpp rewrote a Hugging Face regex for its own engine (``(?i:'s|...)``
spelled out as ``'[sS]|...``) we use its spelling. A missing ``pre`` key means
``default``, as in llama.cpp (which warns that quality will suffer).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import TokenizerError

GPT2 = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)"
LLAMA3 = (
    r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"
    r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
QWEN2 = (
    r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"
    r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)


@dataclass(frozen=True)
class PreTokenizer:
    """How llama.cpp splits text before byte-level BPE for one ``pre`` value."""

    regexes: tuple[str, ...]
    ignore_merges: bool = False  # a whole piece that is a token is taken as is
    add_bos: bool = False  # llama.cpp's default when the file has no add_bos key


_DEFAULT = PreTokenizer(
    (r"[\p{P}\$\+<=>\^~\|]+", GPT2, r"\p{N}+", r"[0-9][0-9][0-9]"),
)
_GPT2 = PreTokenizer((GPT2,))
_LLAMA3 = PreTokenizer((LLAMA3,), ignore_merges=True, add_bos=True)
_QWEN2 = PreTokenizer((QWEN2,))
_STARCODER = PreTokenizer((r"\p{N}", GPT2))
_FALCON = PreTokenizer((r"[\p{P}\$\+<=>\^~\|`]+", GPT2, r"[0-9][0-9][0-9]"))

#: ``tokenizer.ggml.pre`` values we support, grouped as llama.cpp groups them.
PRE_TOKENIZERS: dict[str, PreTokenizer] = {
    "default": _DEFAULT,
    **dict.fromkeys(("gpt-2", "phi-2", "mpt", "olmo", "jais", "exaone4"), _GPT2),
    **dict.fromkeys(
        ("llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "lfm2"), _LLAMA3
    ),
    **dict.fromkeys(("dbrx", "smaug-bpe"), PreTokenizer((LLAMA3,))),
    **dict.fromkeys(("qwen2", "deepseek-r1-qwen", "megrez", "stablelm2"), _QWEN2),
    **dict.fromkeys(
        ("starcoder", "refact", "command-r", "smollm", "codeshell", "exaone", "minerva-7b"),
        _STARCODER,
    ),
    "falcon": _FALCON,
}


def pre_tokenizer_for(pre: str | None) -> PreTokenizer:
    """The pre-tokenizer for a ``tokenizer.ggml.pre`` value (``None``: ``default``)."""
    if pre is None or pre == "":
        return _DEFAULT
    try:
        return PRE_TOKENIZERS[pre]
    except KeyError:
        raise TokenizerError(
            f"tokenizer metadata: pre-tokenizer {pre!r} is not supported "
            f"(supported: {', '.join(sorted(PRE_TOKENIZERS))})"
        ) from None
