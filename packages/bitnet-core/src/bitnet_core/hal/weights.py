"""Host-side description of a ternary weight matrix, as providers receive it.

A ``TernaryWeight`` is what the model loader hands to
``KernelProvider.load_ternary``: the matrix's shape, the format its bytes are
in (usually a view into the memory-mapped GGUF file, so nothing is copied
until a provider asks), and a codec that unpacks it. Providers pick what
suits them:

- ``codes()``: int8 ``[rows, cols]`` in {-1, 0, +1} (simple, 1 byte a weight);
- ``packed_i2()``: the canonical 2-bit packing below (a quarter of that);
- ``raw``: the file's own bytes, for a provider that computes on that layout.

Canonical I2 packing (``packed_i2``): row-major, each row padded with zeros
to a multiple of 4 columns; byte ``j`` of a row holds columns ``4j..4j+3``,
column ``4j+i`` in bits ``2i..2i+1`` as the code ``value + 1`` (0 -> -1,
1 -> 0, 2 -> +1). The matrix value is ``codes[r, c] * scales[r]``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from ..errors import QuantizationError, ShapeError


class TernaryCodec(Protocol):
    """Unpacks one on-disk ternary format (implemented in ``bitnet_core.formats``)."""

    name: str

    def unpack(self, raw: np.ndarray, rows: int, cols: int) -> tuple[np.ndarray, np.ndarray]:
        """Return ``(codes int8 [rows, cols], scales float32 [rows])``."""
        ...


def pack_i2(codes: np.ndarray) -> np.ndarray:
    """Pack int8 ternary codes ``[rows, cols]`` into the canonical I2 layout."""
    codes = np.asarray(codes)
    if codes.ndim != 2:
        raise ShapeError(f"ternary codes must be 2-D, got shape {codes.shape}")
    rows, cols = codes.shape
    padded = (cols + 3) // 4 * 4
    u = np.zeros((rows, padded), dtype=np.uint8)
    u[:, :cols] = (codes.astype(np.int16) + 1).astype(np.uint8)
    if u[:, :cols].max(initial=0) > 2:
        raise QuantizationError("ternary codes must be in {-1, 0, +1}")
    u = u.reshape(rows, padded // 4, 4)
    return (u[..., 0] | (u[..., 1] << 2) | (u[..., 2] << 4) | (u[..., 3] << 6)).astype(np.uint8)


def unpack_i2(packed: np.ndarray, cols: int) -> np.ndarray:
    """Inverse of :func:`pack_i2`: int8 codes ``[rows, cols]``."""
    packed = np.asarray(packed, dtype=np.uint8)
    rows = packed.shape[0]
    if packed.shape[1] * 4 < cols:
        raise ShapeError(f"packed I2 rows of {packed.shape[1]} bytes cannot hold {cols} columns")
    shifts = np.array([0, 2, 4, 6], dtype=np.uint8)
    u = (packed[:, :, None] >> shifts) & 3
    codes = u.reshape(rows, -1)[:, :cols].astype(np.int8) - 1
    if (codes > 1).any():
        raise QuantizationError("invalid I2 code 3 in packed ternary data")
    return codes


class _CodesCodec:
    """Codec for weights already held as int8 codes (tests, freshly quantized weights)."""

    name = "codes"

    def __init__(self, scales: np.ndarray) -> None:
        self._scales = scales

    def unpack(self, raw: np.ndarray, rows: int, cols: int) -> tuple[np.ndarray, np.ndarray]:
        return raw.reshape(rows, cols), self._scales


@dataclass(eq=False)
class TernaryWeight:
    """A ternary matrix ``[rows, cols]`` (rows = output features, cols = input features)."""

    name: str
    rows: int
    cols: int
    format: str
    raw: np.ndarray
    codec: TernaryCodec = field(repr=False)

    @classmethod
    def from_codes(
        cls, codes: np.ndarray, scales: np.ndarray | float, name: str = "weight"
    ) -> TernaryWeight:
        """Wrap int8 codes in {-1,0,1} ``[rows, cols]`` and per-row (or one) scale."""
        codes = np.ascontiguousarray(codes, dtype=np.int8)
        if codes.ndim != 2:
            raise ShapeError(f"{name}: ternary codes must be 2-D, got shape {codes.shape}")
        if codes.size and (np.abs(codes).max() > 1):
            raise QuantizationError(f"{name}: ternary codes must be in {{-1, 0, +1}}")
        rows, cols = codes.shape
        s = np.broadcast_to(np.asarray(scales, dtype=np.float32), (rows,)).copy()
        return cls(name, rows, cols, "codes", codes, _CodesCodec(s))

    def unpack(self) -> tuple[np.ndarray, np.ndarray]:
        """``(codes int8 [rows, cols], scales float32 [rows])``, checked."""
        codes, scales = self.codec.unpack(self.raw, self.rows, self.cols)
        if codes.shape != (self.rows, self.cols) or scales.shape != (self.rows,):
            raise QuantizationError(
                f"{self.name}: {self.format} unpacked to {codes.shape}/{scales.shape}, "
                f"expected ({self.rows}, {self.cols})/({self.rows},)"
            )
        return codes, scales

    def native_source(self) -> tuple[str, np.ndarray | None] | None:
        """``(layout name, per-row scale factor or None)`` where the native module may
        read ``raw`` as it is (``TernaryMatrix.from_raw``), else None."""
        if not getattr(self.codec, "native_reader", False):
            return None
        return self.format, getattr(self.codec, "factor", None)

    def codes(self) -> np.ndarray:
        return self.unpack()[0]

    def scales(self) -> np.ndarray:
        return self.unpack()[1]

    def packed_i2(self) -> np.ndarray:
        return pack_i2(self.codes())

    def dense(self) -> np.ndarray:
        """The float32 matrix ``codes * scales[:, None]`` (reference and debugging only)."""
        codes, scales = self.unpack()
        return codes.astype(np.float32) * scales[:, None]
