"""Ternary weights as the OpenCL kernels keep them resident on the device.

Layout: 2 bits a weight, the code ``value + 1``, rows padded to a multiple
of 64 columns with the code of 0, so a row is a whole number of 16-byte blocks
(``uint4``) and the padding contributes nothing (the kernels need no tail
code). Read as little-endian 32-bit words, word ``w`` holds columns
``16w..16w+15``: column ``16w + 4i + j`` in byte ``j``, bits ``2i..2i+1``.
Then ``(word >> 2i) & 0x03030303`` is the codes of 4 consecutive columns,
one a byte, lined up with 4 consecutive int8 activations for a packed dot
product (``dp4a``) without shuffling either side.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from bitnet_core.errors import QuantizationError, ShapeError
from bitnet_core.hal.weights import TernaryWeight

BLOCK_COLS = 64  # codes per 16-byte block


def padded_cols(cols: int) -> int:
    return max(BLOCK_COLS, (cols + BLOCK_COLS - 1) // BLOCK_COLS * BLOCK_COLS)


def pack_blocks(codes: np.ndarray) -> np.ndarray:
    """int8 codes ``[rows, cols]`` in {-1, 0, 1} -> uint8 ``[rows, padded_cols(cols) / 4]``."""
    if codes.ndim != 2:
        raise ShapeError(f"ternary codes must be 2-D, got shape {codes.shape}")
    rows, cols = codes.shape
    u = np.ones((rows, padded_cols(cols)), dtype=np.uint8)  # code of 0
    u[:, :cols] = (codes.astype(np.int16) + 1).astype(np.uint8)
    if u.max(initial=0) > 2:
        raise QuantizationError("ternary codes must be in {-1, 0, +1}")
    u = u.reshape(rows, -1, 4, 4)  # [row, word, i, j]: column 16w + 4i + j
    packed = u[:, :, 0] | (u[:, :, 1] << 2) | (u[:, :, 2] << 4) | (u[:, :, 3] << 6)
    return np.ascontiguousarray(packed.reshape(rows, -1), dtype=np.uint8)


def unpack_blocks(packed: np.ndarray, cols: int) -> np.ndarray:
    """Inverse of :func:`pack_blocks`: int8 codes ``[rows, cols]`` (tests, debugging)."""
    rows = packed.shape[0]
    shifts = np.array([0, 2, 4, 6], dtype=np.uint8)
    words = packed.reshape(rows, -1, 1, 4)  # [row, word, 1, j]
    u = (words >> shifts[None, None, :, None]) & 3  # [row, word, i, j]
    return (u.reshape(rows, -1)[:, :cols].astype(np.int8) - 1).astype(np.int8)


@dataclass(eq=False)
class OpenCLWeight:
    """A ternary matrix on the device: packed codes and per-row float32 scales."""

    name: str
    rows: int
    cols: int
    packed: Any  # cl.Buffer, [rows, padded_cols / 4] bytes
    scales: Any  # cl.Buffer, float32 [rows]

    @property
    def shape(self) -> tuple[int, int]:
        return (self.rows, self.cols)

    @property
    def blocks_per_row(self) -> int:
        """16-byte blocks (``uint4``) per packed row."""
        return padded_cols(self.cols) // BLOCK_COLS

    @property
    def nbytes(self) -> int:
        """Bytes a product reads: the packed codes and the scales."""
        return self.rows * self.blocks_per_row * 16 + self.rows * 4


def host_layout(weight: TernaryWeight) -> tuple[np.ndarray, np.ndarray]:
    """``(packed uint8 [rows, padded/4], scales float32 [rows])`` from any ternary format."""
    codes, scales = weight.unpack()
    return pack_blocks(codes), np.ascontiguousarray(scales, dtype=np.float32)
