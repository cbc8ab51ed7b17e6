"""Device layouts of ternary weights, shared by name (``PACKINGS``).

- ``"i2_lanes"``: 2 bits a weight, the code ``value + 1``, rows padded with
  the code of 0 to a multiple of ``col_multiple`` columns. Read as
  little-endian 32-bit words, word ``w`` holds columns ``16w..16w+15``:
  column ``16w + 4a + b`` in byte ``b``, bits ``2a..2a+1``. Then
  ``(word >> 2a) & 0x03030303`` is the codes of 4 consecutive columns, one a
  byte, lined up with 4 consecutive int8 activations for a packed dot product
  (``dp4a``, ``dot4I8Packed``) without shuffling either side. OpenCL pads to
  64 columns (16-byte blocks), CUDA to 64, WebGPU to 16.
- ``"i2_rows"``: the canonical I2 packing (``hal.weights.pack_i2``: four codes
  a byte, low bits first), rows padded with zero codes to whole 32-bit words
  (Vulkan).

The padding contributes nothing (code of 0), so kernels need no tail code.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ..errors import QuantizationError, ShapeError
from ..hal.weights import pack_i2, unpack_i2


def _codes(codes: np.ndarray) -> tuple[int, int]:
    if codes.ndim != 2:
        raise ShapeError(f"ternary codes must be 2-D, got shape {codes.shape}")
    if codes.size and (codes.min() < -1 or codes.max() > 1):
        raise QuantizationError("ternary codes must be in {-1, 0, +1}")
    return codes.shape


def padded(cols: int, col_multiple: int) -> int:
    """``cols`` rounded up to ``col_multiple`` (at least one multiple)."""
    return max(1, -(-cols // col_multiple)) * col_multiple


def pack_lanes(codes: np.ndarray, col_multiple: int = 16) -> np.ndarray:
    """int8 codes ``[rows, cols]`` -> uint32 ``[rows, padded(cols) / 16]`` (``"i2_lanes"``)."""
    if col_multiple % 16:
        raise ValueError("i2_lanes pads rows to a multiple of 16 columns (whole words)")
    rows, cols = _codes(codes)
    u = np.ones((rows, padded(cols, col_multiple)), dtype=np.uint32)  # code of 0
    u[:, :cols] = codes.astype(np.int32) + 1
    u = u.reshape(rows, -1, 4, 4)  # [row, word, a, b]: column 16w + 4a + b
    shifts = (2 * np.arange(4)[:, None] + 8 * np.arange(4)[None, :]).astype(np.uint32)
    return np.bitwise_or.reduce(u << shifts, axis=(2, 3)).astype(np.uint32)


def unpack_lanes(words: np.ndarray, cols: int) -> np.ndarray:
    """Inverse of ``pack_lanes``: int8 codes ``[rows, cols]`` (tests, debugging)."""
    words = np.asarray(words).view(np.uint32).reshape(words.shape[0], -1)
    shifts = (2 * np.arange(4)[:, None] + 8 * np.arange(4)[None, :]).astype(np.uint32)
    u = (words[:, :, None, None] >> shifts) & 3  # [row, word, a, b]
    return (u.reshape(words.shape[0], -1)[:, :cols].astype(np.int8) - 1).astype(np.int8)


def pack_rows(codes: np.ndarray) -> np.ndarray:
    """int8 codes ``[rows, cols]`` -> uint8 ``[rows, 4 * ceil(cols / 16)]`` (``"i2_rows"``)."""
    rows, cols = _codes(codes)
    full = np.zeros((rows, padded(cols, 16)), dtype=np.int8)  # zero codes in the padding
    full[:, :cols] = codes
    return pack_i2(full)


def unpack_rows(packed: np.ndarray, cols: int) -> np.ndarray:
    """Inverse of ``pack_rows``."""
    return unpack_i2(np.asarray(packed, dtype=np.uint8), cols)


@dataclass(frozen=True)
class Packing:
    """A named device layout: ``pack(codes)`` and its inverse ``unpack(packed, cols)``."""

    name: str
    pack: Callable[[np.ndarray], np.ndarray]
    unpack: Callable[[np.ndarray, int], np.ndarray]


PACKINGS: dict[str, Packing] = {
    "i2_lanes": Packing("i2_lanes", pack_lanes, unpack_lanes),
    "i2_rows": Packing("i2_rows", pack_rows, unpack_rows),
}
