"""TQ2_0: llama.cpp's 2-bit ternary blocks (GGML type 35).

Block of 256 weights, 66 bytes: ``qs[64]`` then an f16 ``d``. Weight
``e = 128*j + 32*l + m`` (j in 0..1, l in 0..3, m in 0..31) is the 2-bit code
``(qs[32*j + m] >> 2*l) & 3``, value ``(code - 1) * d`` (llama.cpp
``ggml-quants.c`` ``dequantize_row_tq2_0``; gguf-py ``quants.TQ2_0``). Code 3
(value 2) is never produced by a ternary quantizer and is rejected here.
"""

from __future__ import annotations

import numpy as np

from ..errors import QuantizationError
from .base import Codec, check_codes, row_scales, row_scales_from_blocks

QK = 256
BLOCK_BYTES = 66
_SHIFTS = np.array([0, 2, 4, 6], dtype=np.uint8)


class TQ2_0(Codec):
    name = "tq2_0"
    ggml_type = 35
    col_multiple = QK
    native_reader = True

    def nbytes(self, rows: int, cols: int) -> int:
        return rows * (cols // QK) * BLOCK_BYTES

    def pack(self, codes: np.ndarray, scales: np.ndarray | float) -> np.ndarray:
        codes = check_codes(codes, self.name)
        rows, cols = codes.shape
        self.check_shape(rows, cols)
        s = row_scales(scales, rows, self.name)
        nb = rows * (cols // QK)
        q = (codes.reshape(nb, 2, 4, 32) + 1).astype(np.uint8) << _SHIFTS.reshape(1, 1, 4, 1)
        qs = (q[:, :, 0] | q[:, :, 1] | q[:, :, 2] | q[:, :, 3]).reshape(nb, 64)
        live = codes.reshape(nb, QK).any(axis=1)
        d = np.where(live, np.repeat(s, cols // QK), 0).astype(np.float16)
        return np.concatenate([qs, d.view(np.uint8).reshape(nb, 2)], axis=1).reshape(-1)

    def unpack_numpy(self, raw: np.ndarray, rows: int, cols: int) -> tuple[np.ndarray, np.ndarray]:
        blocks = self.raw_bytes(raw, rows, cols).reshape(-1, BLOCK_BYTES)
        nb = blocks.shape[0]
        d = blocks[:, 64:66].copy().view(np.float16).reshape(nb).astype(np.float32)
        q = (blocks[:, :64].reshape(nb, 2, 1, 32) >> _SHIFTS.reshape(1, 1, 4, 1)) & 3
        q = q.reshape(nb, QK)
        if (q == 3).any():
            raise QuantizationError(f"{self.name}: code 3 (value +2) is not ternary")
        codes = q.astype(np.int8) - 1
        codes[d == 0] = 0  # a zero scale makes the whole block zero
        live = codes.any(axis=1)
        scales = row_scales_from_blocks(
            d.reshape(rows, -1), live.reshape(rows, -1), f"{self.name} tensor"
        )
        return codes.reshape(rows, cols), scales
