"""Build a ``tokenizers.Tokenizer`` that encodes exactly as llama.cpp does.

- ``gpt2`` (byte-level BPE): the ``pre`` regexes as a sequence of isolating
  splits, then the GPT-2 byte-to-unicode mapping, then BPE over the file's
  merges (lowest rank first, leftmost on ties: llama.cpp's order).
- ``llama`` (SentencePiece BPE): llama.cpp merges the adjacent pair whose
  concatenation is a token of highest score. A BPE model whose merge list is
  every such pair, ranked by the score of the merged token, is the same
  algorithm (the construction of transformers' ``LlamaConverter``); spaces
  become ``▁``, one is prepended to each text run (``add_space_prefix``), and
  characters that no token covers fall back to ``<0xXX>`` byte tokens.

Control and unknown tokens are special added tokens (parsed only when the
caller asks, as llama.cpp's ``parse_special``); user-defined tokens are always
parsed, as in llama.cpp.
"""

from __future__ import annotations

import numpy as np
from tokenizers import AddedToken, Regex, decoders, models, normalizers, pre_tokenizers
from tokenizers import Tokenizer as HFTokenizer

from ..errors import TokenizerError
from .metadata import TokenType, VocabSpec
from .pretokenize import pre_tokenizer_for

SPACE = "\u2581"  # SentencePiece's visible space


def _added_tokens(spec: VocabSpec) -> tuple[list[AddedToken], list[AddedToken]]:
    kinds = np.asarray(spec.token_types, dtype=np.int64)  # (128k tokens: no Python loop)
    special_ids = np.flatnonzero((kinds == TokenType.CONTROL) | (kinds == TokenType.UNKNOWN))
    user_ids = np.flatnonzero(kinds == TokenType.USER_DEFINED)
    special = [AddedToken(spec.tokens[i], special=True, normalized=False) for i in special_ids]
    user = [AddedToken(spec.tokens[i], special=False, normalized=False) for i in user_ids]
    return special, user


def _vocab(spec: VocabSpec) -> dict[str, int]:
    return dict(zip(spec.tokens, range(len(spec.tokens)), strict=True))


def build_gpt2(spec: VocabSpec) -> HFTokenizer:
    pre = pre_tokenizer_for(spec.pre)
    vocab = _vocab(spec)
    # checked here: ``tokenizers`` panics (a Rust backtrace, then BaseException) on such a merge
    for a, b in spec.merges:
        if a not in vocab or b not in vocab or a + b not in vocab:
            raise TokenizerError(
                f"tokenizer metadata: merge {a!r} {b!r} uses a text that is not a token"
            )
    try:
        model = models.BPE(
            vocab=vocab, merges=spec.merges, ignore_merges=pre.ignore_merges, fuse_unk=False
        )
    except Exception as exc:
        raise TokenizerError(f"tokenizer metadata: cannot build the BPE model: {exc}") from exc
    tok = HFTokenizer(model)
    splits = [pre_tokenizers.Split(Regex(r), behavior="isolated") for r in pre.regexes]
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [*splits, pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)]
    )
    tok.decoder = decoders.ByteLevel()
    return tok


def spm_merges(spec: VocabSpec) -> list[tuple[str, str]]:
    """Every (left, right) pair of tokens whose concatenation is a token, best score first."""
    vocab = _vocab(spec)
    ranked = []
    for merged, idx in vocab.items():
        if spec.token_types[idx] == TokenType.BYTE or len(merged) < 2:
            continue
        score = spec.scores[idx]
        for cut in range(1, len(merged)):
            left, right = merged[:cut], merged[cut:]
            if left in vocab and right in vocab:
                ranked.append((-score, idx, cut, left, right))
    ranked.sort()
    return [(left, right) for _, _, _, left, right in ranked]


def build_llama(spec: VocabSpec) -> HFTokenizer:
    vocab = _vocab(spec)
    unk = spec.tokens[spec.unk_id] if spec.unk_id is not None else None
    try:
        model = models.BPE(
            vocab=vocab, merges=spm_merges(spec), unk_token=unk, byte_fallback=True, fuse_unk=False
        )
    except Exception as exc:
        raise TokenizerError(f"tokenizer metadata: cannot build the SPM model: {exc}") from exc
    tok = HFTokenizer(model)
    steps = [normalizers.Replace(" ", SPACE)]
    if spec.add_space_prefix:
        steps.insert(0, normalizers.Prepend(SPACE))
    tok.normalizer = normalizers.Sequence(steps)
    tok.decoder = decoders.Sequence(
        [decoders.Replace(SPACE, " "), decoders.ByteFallback(), decoders.Fuse()]
    )
    return tok


def build(spec: VocabSpec) -> HFTokenizer:
    """The ``tokenizers`` object for a validated vocabulary."""
    tok = build_gpt2(spec) if spec.model == "gpt2" else build_llama(spec)
    special, user = _added_tokens(spec)
    if user:
        tok.add_tokens(user)
    if special:
        tok.add_special_tokens(special)
    n = tok.get_vocab_size(with_added_tokens=True)
    if n != len(spec.tokens):
        raise TokenizerError(
            f"tokenizer metadata: built a vocabulary of {n} tokens from {len(spec.tokens)}"
        )
    return tok
