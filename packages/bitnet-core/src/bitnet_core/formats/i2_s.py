"""I2_S: bitnet.cpp's 2-bit layout with one scale per tensor (GGML type 36 in its ggml fork).

The tensor (``N = rows * cols`` weights, row-major) is cut into blocks of
128 weights, 32 bytes each: weight ``j`` of a block is stored in byte
``j % 32`` at bits ``6 - 2*(j // 32)`` (so byte ``b`` holds weights ``b``,
``b+32``, ``b+64``, ``b+96`` from its high bits down), as the code
``value + 1`` (0 -> -1, 1 -> 0, 2 -> +1). After the ``N / 4`` packed bytes
comes the tensor's one float32 scale, then 28 zero bytes: the data is
``N / 4 + 32`` bytes. Sources (microsoft/BitNet): ``src/ggml-bitnet-mad.cpp``
``quantize_i2_s`` (x86 path, ``QK_I2_S = 128``), the fork's ``ggml.c``
(``ggml_nbytes``: ``nbytes / 4 + 32`` for I2_S), ``dequantize_row_i2_s``
(code 3 reads as 0 there, but its matmul would read it as +2: rejected here).
"""

from __future__ import annotations

import numpy as np

from ..errors import QuantizationError
from .base import Codec, check_codes, row_scales

QK = 128
TRAILER = 32
_SHIFTS = np.array([6, 4, 2, 0], dtype=np.uint8)


def tensor_scale(s: np.ndarray, live: np.ndarray, what: str) -> np.float32:
    """The one scale of a tensor whose live rows must share it."""
    vals = np.unique(s[live])
    if vals.size > 1:
        raise QuantizationError(
            f"{what}: needs one scale per tensor, got {vals.size} different row scales"
        )
    return np.float32(vals[0]) if vals.size else np.float32(0)


class I2_S(Codec):
    name = "i2_s"
    ggml_type = 36
    col_multiple = QK  # bitnet.cpp's kernels walk each row in 128-weight blocks
    native_reader = True

    def nbytes(self, rows: int, cols: int) -> int:
        return rows * cols // 4 + TRAILER

    def pack(self, codes: np.ndarray, scales: np.ndarray | float) -> np.ndarray:
        codes = check_codes(codes, self.name)
        rows, cols = codes.shape
        self.check_shape(rows, cols)
        s = row_scales(scales, rows, self.name)
        scale = tensor_scale(s, codes.any(axis=1), self.name)
        n = rows * cols
        q = (codes.reshape(n // QK, 4, 32) + 1).astype(np.uint8) << _SHIFTS.reshape(1, 4, 1)
        packed = (q[:, 0] | q[:, 1] | q[:, 2] | q[:, 3]).reshape(-1)
        trailer = np.zeros(TRAILER, dtype=np.uint8)
        trailer[:4] = np.array([scale], dtype="<f4").view(np.uint8)
        return np.concatenate([packed, trailer])

    def unpack_numpy(self, raw: np.ndarray, rows: int, cols: int) -> tuple[np.ndarray, np.ndarray]:
        data = self.raw_bytes(raw, rows, cols)
        n = rows * cols
        scale = data[n // 4 : n // 4 + 4].copy().view("<f4")[0]
        if not np.isfinite(scale):
            raise QuantizationError(f"{self.name}: tensor scale is not finite ({scale})")
        q = (data[: n // 4].reshape(-1, 1, 32) >> _SHIFTS.reshape(1, 4, 1)) & 3
        if (q == 3).any():
            raise QuantizationError(f"{self.name}: invalid 2-bit code 3 in packed data")
        codes = (q.astype(np.int8) - 1).reshape(rows, cols)
        return codes, np.full(rows, scale, dtype=np.float32)
