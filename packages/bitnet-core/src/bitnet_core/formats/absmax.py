"""Activations to int8: BitNet b1.58's per-token absmax rule (the reference quantiser).

Each row (token) of ``x`` ``[T, K]`` is scaled so its largest magnitude maps to
127: ``scale = 127 / max(max|x|, 1e-5)``, ``xq = clip(round(x * scale), -128,
127)``, with ``x ~= xq / scale`` (transformers' ``BitNetForCausalLM`` and
llama.cpp). ``providers.reference`` runs it as the ``quantize_act`` op, which
every provider's ``quantize_act`` is tested against.
"""

from __future__ import annotations

import numpy as np

from ..errors import ShapeError

ACT_QMAX = 127.0
#: Lower bound of a row's absmax (an all-zero row gets scale 127 / 1e-5)
ACT_EPS = 1e-5


def quantize_act_ref(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-row absmax int8 quantization: ``(xq int8 [T, K], scale float32 [T])``."""
    x = np.asarray(x, dtype=np.float32)
    if x.ndim != 2:
        raise ShapeError(f"quantize_act expects [T, K] activations, got shape {x.shape}")
    amax = np.maximum(np.abs(x).max(axis=1, initial=0.0), np.float32(ACT_EPS))
    scale = (np.float32(ACT_QMAX) / amax).astype(np.float32)
    xq = np.clip(np.round(x * scale[:, None]), -128, 127).astype(np.int8)
    return xq, scale
