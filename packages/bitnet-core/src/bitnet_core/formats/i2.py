"""I2: the canonical 2-bit packing of ``hal.weights`` plus per-row float32 scales.

``rows * ceil(cols/4)`` bytes of ``pack_i2`` codes (column ``4j+i`` of a row in
bits ``2i`` of byte ``j``, code ``value + 1``), then ``rows`` float32 scales.
The output of ``quantize(x, "i2s")`` (seed 003's I2S quantizer); it has no
GGML type and is not written to GGUF files.
"""

from __future__ import annotations

import numpy as np

from ..hal.weights import pack_i2, unpack_i2
from .base import Codec, check_codes, row_scales


class I2(Codec):
    name = "i2"

    def nbytes(self, rows: int, cols: int) -> int:
        return rows * (-(-cols // 4)) + 4 * rows

    def pack(self, codes: np.ndarray, scales: np.ndarray | float) -> np.ndarray:
        codes = check_codes(codes, self.name)
        s = row_scales(scales, codes.shape[0], self.name)
        return np.concatenate([pack_i2(codes).reshape(-1), s.astype("<f4").view(np.uint8)])

    def unpack(self, raw: np.ndarray, rows: int, cols: int) -> tuple[np.ndarray, np.ndarray]:
        data = self.raw_bytes(raw, rows, cols)
        body = rows * (-(-cols // 4))
        codes = unpack_i2(data[:body].reshape(rows, -1), cols)
        scales = data[body:].copy().view("<f4").astype(np.float32)
        return codes, row_scales(scales, rows, self.name)
