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
from .tq_blocks import QK, TernaryBlockCodec

BLOCK_BYTES = 66
_SHIFTS = np.array([0, 2, 4, 6], dtype=np.uint8)


class TQ2_0(TernaryBlockCodec):
    name = "tq2_0"
    ggml_type = 35
    block_bytes = BLOCK_BYTES

    def pack_blocks(self, codes: np.ndarray) -> np.ndarray:
        nb = codes.shape[0]
        q = (codes.reshape(nb, 2, 4, 32) + 1).astype(np.uint8) << _SHIFTS.reshape(1, 1, 4, 1)
        return (q[:, :, 0] | q[:, :, 1] | q[:, :, 2] | q[:, :, 3]).reshape(nb, 64)

    def unpack_blocks(self, data: np.ndarray) -> np.ndarray:
        nb = data.shape[0]
        q = (data.reshape(nb, 2, 1, 32) >> _SHIFTS.reshape(1, 1, 4, 1)) & 3
        q = q.reshape(nb, QK)
        if (q == 3).any():
            raise QuantizationError(f"{self.name}: code 3 (value +2) is not ternary")
        return q.astype(np.int8) - 1
