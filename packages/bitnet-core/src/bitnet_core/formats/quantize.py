"""Seed 003's quantizers: float weights to I2S, TL1 or TL2.

``quantize(x, qtype)`` ternarizes each row of ``x`` (1-D: one row) and packs
it. Scales are per row: a row that is already ternary (``codes * s``) keeps
``s`` exactly, so the round trip is exact; otherwise ``s = mean|row|``
(absmean) and ``codes = clamp(round(row / s), -1, 1)``.

Error bound on general input, element-wise, with ``s`` the row's scale:
``|x - dequantize(quantize(x))| <= max(s / 2, |x| - s)`` (rounding error
below the clip point ``1.5 s``, clipping error above it), and 0 for
``x == 0``. The dequantized row is exact (float32) for ternary input.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import QuantizationError
from .absmax import quantize_act_ref
from .absmean import ternarize_rows
from .base import Codec
from .registry import get_codec

#: Quantizer names (seed 003) -> codec names.
QTYPES = {"i2s": "i2", "tl1": "tl1", "tl2": "tl2"}

#: Per-token int8 activation quantization (absmax), as the model uses it:
#: ``(xq int8 [T, K], scale float32 [T])`` with ``x ~= xq / scale``.
quantize_activations = quantize_act_ref


@dataclass(frozen=True)
class QuantizedTensor:
    """The result of :func:`quantize`."""

    qtype: str
    shape: tuple[int, ...]
    data: np.ndarray  # uint8, the codec's bytes (scales included)
    scales: np.ndarray  # float32 [rows]
    codec: Codec

    @property
    def rows(self) -> int:
        return 1 if len(self.shape) == 1 else self.shape[0]

    @property
    def cols(self) -> int:
        return self.shape[-1]

    def unpack(self) -> tuple[np.ndarray, np.ndarray]:
        return self.codec.unpack(self.data, self.rows, self.cols)

    def dequantize(self) -> np.ndarray:
        """float32 array of the input's shape."""
        return self.codec.dequantize(self.data, self.rows, self.cols).reshape(self.shape)


def quantize(x: np.ndarray, qtype: str) -> QuantizedTensor:
    """Quantize a 1-D or 2-D float array to ``qtype`` in ``{"i2s", "tl1", "tl2"}``."""
    key = str(qtype).lower()
    if key not in QTYPES:
        raise QuantizationError(f"unknown quantization type {qtype!r}; known: {', '.join(QTYPES)}")
    arr = np.asarray(x)
    if arr.ndim not in (1, 2) or arr.size == 0:
        raise QuantizationError(f"quantize expects a non-empty 1-D or 2-D array, got {arr.shape}")
    codes, scales = ternarize_rows(arr, per_row=True)
    codec = get_codec(QTYPES[key])
    return QuantizedTensor(key, tuple(arr.shape), codec.pack(codes, scales), scales, codec)
