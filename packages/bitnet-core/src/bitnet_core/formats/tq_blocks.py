"""What llama.cpp's ternary block layouts TQ1_0 and TQ2_0 share: blocks of 256
weights, each its packed codes then one float16 scale ``d`` (value = code * d).

``TernaryBlockCodec`` packs and unpacks the blocks, their scales and the checks
(equal scales within a row, a zero ``d`` makes its block zero); a layout
supplies only how one block's codes become bytes and back.
"""

from __future__ import annotations

import numpy as np

from .base import Codec, check_codes, row_scales, row_scales_from_blocks

QK = 256


class TernaryBlockCodec(Codec):
    """A layout of 256-weight blocks: ``block_bytes - 2`` bytes of codes, then f16 ``d``."""

    block_bytes: int = 0
    col_multiple = QK
    native_reader = True

    def pack_blocks(self, codes: np.ndarray) -> np.ndarray:
        """int8 codes ``[nb, 256]`` -> uint8 ``[nb, block_bytes - 2]``."""
        raise NotImplementedError

    def unpack_blocks(self, data: np.ndarray) -> np.ndarray:
        """uint8 ``[nb, block_bytes - 2]`` -> int8 codes ``[nb, 256]`` (``QuantizationError``
        for bytes no ternary code makes)."""
        raise NotImplementedError

    def nbytes(self, rows: int, cols: int) -> int:
        return rows * (cols // QK) * self.block_bytes

    def pack(self, codes: np.ndarray, scales: np.ndarray | float) -> np.ndarray:
        codes = check_codes(codes, self.name)
        rows, cols = codes.shape
        self.check_shape(rows, cols)
        s = row_scales(scales, rows, self.name)
        blocks = codes.reshape(rows * (cols // QK), QK)
        live = blocks.any(axis=1)
        d = np.where(live, np.repeat(s, cols // QK), 0).astype(np.float16)
        data = self.pack_blocks(blocks)
        out = np.concatenate([data, d.view(np.uint8).reshape(-1, 2)], axis=1)
        return out.reshape(-1)

    def unpack_numpy(self, raw: np.ndarray, rows: int, cols: int) -> tuple[np.ndarray, np.ndarray]:
        blocks = self.raw_bytes(raw, rows, cols).reshape(-1, self.block_bytes)
        nb = blocks.shape[0]
        d = blocks[:, -2:].copy().view(np.float16).reshape(nb).astype(np.float32)
        codes = self.unpack_blocks(blocks[:, :-2])
        codes[d == 0] = 0  # a zero scale makes the whole block zero
        live = codes.any(axis=1)
        scales = row_scales_from_blocks(
            d.reshape(rows, -1), live.reshape(rows, -1), f"{self.name} tensor"
        )
        return codes.reshape(rows, cols), scales
