"""Float weights to ternary: BitNet b1.58's absmean rule.

``absmean_ternary`` is the rule of Hugging Face transformers'
``BitNetForCausalLM`` (``models/bitnet``) and llama.cpp's converter: one scale
``s = mean|W|`` for the tensor, ``codes = clamp(round(W / s), -1, 1)``, the
layer computing with ``codes * s``. ``ternarize_rows`` is what loading and
quantizing use: a row that is already ternary (all its non-zero magnitudes
equal, as in a llama.cpp F16 BitNet file storing ``round(W/s)*s``) keeps its
exact scale; otherwise absmean applies.
"""

from __future__ import annotations

import numpy as np

from ..errors import QuantizationError

#: Lower bound of the absmean scale (transformers clamps ``mean|W|`` to 1e-5).
ABSMEAN_EPS = 1e-5


def _as_2d_float(w: np.ndarray, what: str) -> np.ndarray:
    w = np.asarray(w, dtype=np.float32)
    if w.ndim == 1:
        w = w.reshape(1, -1)
    if w.ndim != 2:
        raise QuantizationError(f"{what}: expected a 1-D or 2-D weight, got shape {w.shape}")
    if not np.isfinite(w).all():
        raise QuantizationError(f"{what}: weight has NaN or infinite values")
    return w


def absmean_ternary(w: np.ndarray) -> tuple[np.ndarray, float]:
    """``(codes int8 like w, scale)`` with ``scale = max(mean|W|, 1e-5)`` over the whole tensor."""
    arr = np.asarray(w, dtype=np.float32)
    if arr.size and not np.isfinite(arr).all():
        raise QuantizationError("absmean_ternary: weight has NaN or infinite values")
    scale = max(float(np.mean(np.abs(arr), dtype=np.float64)) if arr.size else 0.0, ABSMEAN_EPS)
    codes = np.clip(np.round(arr / np.float32(scale)), -1, 1).astype(np.int8)
    return codes, scale


def ternary_row_scales(w: np.ndarray) -> np.ndarray | None:
    """Per-row scales if every row of ``w`` is already ternary (one magnitude), else None."""
    a = np.abs(w)
    nz = a != 0
    hi = a.max(axis=1, initial=0.0)
    lo = np.where(nz, a, np.inf).min(axis=1, initial=np.inf)
    lo = np.where(nz.any(axis=1), lo, 0.0)
    return hi.astype(np.float32) if np.array_equal(hi, lo) else None


def ternarize_rows(w: np.ndarray, per_row: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """``(codes int8 [rows, cols], scales float32 [rows])`` of a float weight.

    Exact on ternary input (see module docstring). Otherwise absmean, per row
    when ``per_row`` (the quantizers) or over the tensor (model loading, as
    transformers does).
    """
    w = _as_2d_float(w, "ternarize")
    exact = ternary_row_scales(w)
    if exact is not None:
        return np.sign(w).astype(np.int8), exact
    if per_row:
        s = np.maximum(np.mean(np.abs(w), axis=1, dtype=np.float64), ABSMEAN_EPS)
        s = s.astype(np.float32)
        codes = np.clip(np.round(w / s[:, None]), -1, 1).astype(np.int8)
        return codes, s
    codes, scale = absmean_ternary(w)
    return codes, np.full(w.shape[0], scale, dtype=np.float32)
