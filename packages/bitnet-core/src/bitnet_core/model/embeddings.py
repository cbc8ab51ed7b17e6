"""Text embeddings from an embedding model (``config.pooling`` not ``"none"``).

``embed_ids`` runs token-id lists through the runner's ``hidden_states`` (one batch:
every input's tokens together through the matmuls), pools each input's final hidden
states as the file says (``"last"``: the last token, the end-of-sequence token the
tokenizer appends for Qwen3; ``"mean"``; ``"cls"``: the first), L2-normalizes, and
for a Matryoshka ``dimensions`` keeps the first ``dimensions`` values and normalizes
again.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..errors import ConfigError, ContextLengthError, ShapeError


def pool(hidden: np.ndarray, mode: str) -> np.ndarray:
    """One input's vector from its hidden states ``[T, H]``."""
    if mode == "last":
        return hidden[-1]
    if mode == "cls":
        return hidden[0]
    if mode == "mean":
        return hidden.astype(np.float64).mean(axis=0).astype(np.float32)
    raise ConfigError(f"unknown pooling {mode!r}")


def truncate(vectors: np.ndarray, dimensions: int | None) -> np.ndarray:
    """The first ``dimensions`` values of each row (``ConfigError`` when out of range)."""
    if dimensions is None:
        return vectors
    width = vectors.shape[-1]
    if isinstance(dimensions, bool) or not isinstance(dimensions, int):
        raise ConfigError(f"dimensions must be an integer, got {dimensions!r}")
    if not 1 <= dimensions <= width:
        raise ConfigError(f"dimensions must be between 1 and {width}, got {dimensions}")
    return vectors[..., :dimensions]


def normalize(vectors: np.ndarray, dimensions: int | None = None) -> np.ndarray:
    """Rows truncated to ``dimensions`` (all when None), then L2-normalized (float32)."""
    v = truncate(vectors, dimensions).astype(np.float64)
    norms = np.linalg.norm(v, axis=-1, keepdims=True)
    return (v / np.maximum(norms, 1e-12)).astype(np.float32)


def check_inputs(inputs: Sequence[Sequence[int]], context_length: int, vocab_size: int) -> None:
    """Each input non-empty, within the context, its ids in the vocabulary
    (``ShapeError``/``ContextLengthError``)."""
    for j, ids in enumerate(inputs):
        if len(ids) == 0:
            raise ShapeError(f"input {j} is empty: nothing to embed")
        if len(ids) > context_length:
            raise ContextLengthError(
                f"input {j} has {len(ids)} tokens, more than the model's context of "
                f"{context_length}"
            )
        arr = np.asarray(ids)
        if arr.min() < 0 or arr.max() >= vocab_size:
            bad = int(arr[(arr < 0) | (arr >= vocab_size)][0])
            raise ShapeError(f"input {j}: token id {bad} out of range [0, {vocab_size})")


def embed_ids(
    runner: Any,
    inputs: Sequence[Sequence[int]],
    *,
    dimensions: int | None = None,
    normalized: bool = True,
) -> np.ndarray:
    """Embeddings ``[len(inputs), dimensions or hidden]`` (float32) of token-id lists."""
    cfg = runner.config
    if not cfg.is_embedding:
        raise ConfigError(
            f"this model ({cfg.arch}) is a language model, not an embedding model "
            "(its file has no pooling_type)"
        )
    check_inputs(inputs, cfg.context_length, cfg.vocab_size)
    truncate(np.zeros((1, cfg.hidden_size), np.float32), dimensions)  # checked up front
    if not inputs:
        return np.zeros((0, dimensions or cfg.hidden_size), np.float32)
    hidden = runner.hidden_states([np.asarray(ids, dtype=np.int64) for ids in inputs])
    vectors = np.stack([pool(h, cfg.pooling) for h in hidden])
    return normalize(vectors, dimensions) if normalized else truncate(vectors, dimensions)
