"""Ternary weights as the OpenCL kernels keep them resident on the device.

Layout: the canonical I2 packing of ``bitnet_core.hal.weights`` (byte ``j``
of a row holds columns ``4j..4j+3``, column ``4j+i`` in bits ``2i..2i+1`` as
``value + 1``), with every row padded to a multiple of 64 columns with the
code of 0. A row is then a whole number of 16-byte blocks (``uint4``) and the
padding contributes nothing, so the kernels need no tail code. Read as
little-endian 32-bit words, word ``w`` holds columns ``16w..16w+15``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from bitnet_core.hal.weights import TernaryWeight, pack_i2

BLOCK_COLS = 64  # codes per 16-byte block


def padded_cols(cols: int) -> int:
    return max(BLOCK_COLS, (cols + BLOCK_COLS - 1) // BLOCK_COLS * BLOCK_COLS)


def pack_blocks(codes: np.ndarray) -> np.ndarray:
    """int8 codes ``[rows, cols]`` -> uint8 ``[rows, padded_cols(cols) / 4]``."""
    rows, cols = codes.shape
    padded = np.zeros((rows, padded_cols(cols)), dtype=np.int8)
    padded[:, :cols] = codes
    return pack_i2(padded)


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
