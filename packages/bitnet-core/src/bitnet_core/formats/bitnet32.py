"""BitNet32-F16: the seeds' 32-weight 2-bit blocks with an inline f16 scale each.

Each row is padded with zeros to a multiple of 32 weights; a block is 10
bytes: 8 bytes of codes (byte ``i`` holds weights ``4i .. 4i+3`` in bits
``0-1 .. 6-7``, code ``value + 1``) then the block's f16 scale, little-endian
(BitNet-rs ``docs/explanation/i2s-dual-flavor.md``, ``I2SFlavor::BitNet32F16``:
"32 elems/block, 8B packed + 2B f16 scale"). In a GGUF file it carries GGML
type 36 and is told from I2_S and QK256 by its size, ``rows * ceil(cols/32) * 10``.
"""

from __future__ import annotations

import numpy as np

from .base import Codec, check_codes, pad_cols, row_scales, row_scales_from_blocks
from .qk256 import pack_lsb_first, unpack_lsb_first

QK = 32
BLOCK_BYTES = 10


class BitNet32(Codec):
    name = "bitnet32"
    ggml_type = 36  # shares the I2_S id; told apart by size

    def nbytes(self, rows: int, cols: int) -> int:
        return rows * (-(-cols // QK)) * BLOCK_BYTES

    def pack(self, codes: np.ndarray, scales: np.ndarray | float) -> np.ndarray:
        codes = check_codes(codes, self.name)
        rows = codes.shape[0]
        s = row_scales(scales, rows, self.name)
        padded = pad_cols(codes, QK)
        nb = padded.shape[1] // QK
        qs = pack_lsb_first(padded).reshape(rows * nb, 8)
        d = np.repeat(s, nb).astype(np.float16).view(np.uint8).reshape(rows * nb, 2)
        return np.concatenate([qs, d], axis=1).reshape(-1)

    def unpack(self, raw: np.ndarray, rows: int, cols: int) -> tuple[np.ndarray, np.ndarray]:
        blocks = self.raw_bytes(raw, rows, cols).reshape(-1, BLOCK_BYTES)
        nb = -(-cols // QK)
        d = blocks[:, 8:10].copy().view(np.float16).reshape(-1).astype(np.float32)
        codes = unpack_lsb_first(blocks[:, :8], self.name).reshape(rows * nb, QK)
        codes[d == 0] = 0
        codes = codes.reshape(rows, nb * QK)[:, :cols]
        live = np.zeros((rows, nb), dtype=bool)
        if rows and nb:
            live = pad_cols(codes, QK).reshape(rows, nb, QK).any(axis=2)
        scales = row_scales_from_blocks(d.reshape(rows, nb), live, f"{self.name} tensor")
        return np.ascontiguousarray(codes), scales
