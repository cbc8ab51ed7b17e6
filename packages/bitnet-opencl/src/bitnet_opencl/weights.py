"""Ternary weights as the OpenCL kernels keep them resident on the device.

Layout: the SDK's ``"i2_lanes"`` packing (``bitnet_core.sdk.packing``) with
rows padded to a multiple of 64 columns, so a row is a whole number of
16-byte blocks (``uint4``), read as bytes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from bitnet_core.hal.weights import TernaryWeight
from bitnet_core.sdk.packing import pack_lanes, padded

BLOCK_COLS = 64  # codes per 16-byte block


def padded_cols(cols: int) -> int:
    return padded(cols, BLOCK_COLS)


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
    packed = pack_lanes(codes, BLOCK_COLS).view(np.uint8)
    return packed, np.ascontiguousarray(scales, dtype=np.float32)
