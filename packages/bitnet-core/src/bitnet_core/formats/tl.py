"""TL1 and TL2: table-lookup layouts (seed 003's TL1/TL2 quantizers).

bitnet.cpp's lookup-table kernels index a table of partial sums of the
activations with a small group of weights: TL1 two weights (9 patterns),
TL2 three weights (27 patterns, folded by sign to 14 plus a sign bit). Its
exact on-disk arrangement depends on the kernel tile configuration chosen
at build time (``utils/codegen_tl1.py``, ``codegen_tl2.py``), so these are our
own row-major forms of the same indices, in memory only (no GGUF type):

- TL1: per row, pairs ``(a, b)`` -> index ``3*(a+1) + (b+1)`` in 0..8, two
  indices a byte (first in the low nibble): ``ceil(cols/4)`` bytes (2 bits/weight).
- TL2: per row, triples ``(a, b, c)`` -> ``t = 9*(a+1) + 3*(b+1) + (c+1)`` in 0..26;
  ``t > 13`` is stored as ``26 - t`` (the negated triple) with sign bit 1:
  ``ceil(g/2)`` nibble bytes then ``ceil(g/8)`` sign bytes for ``g = ceil(cols/3)``
  groups (5 bits a triple, ~1.67 bits/weight).

Both end with ``rows`` float32 scales. Rows are padded with zero weights.
"""

from __future__ import annotations

import numpy as np

from ..errors import QuantizationError
from .base import Codec, check_codes, pad_cols, row_scales


def _nibbles(idx: np.ndarray) -> np.ndarray:
    """Indices ``[rows, n]`` (< 16) -> bytes ``[rows, ceil(n/2)]``, low nibble first."""
    if idx.shape[1] % 2:
        idx = np.concatenate([idx, np.zeros((idx.shape[0], 1), np.uint8)], axis=1)
    return (idx[:, 0::2] | (idx[:, 1::2] << 4)).astype(np.uint8)


def _unnibble(b: np.ndarray, n: int) -> np.ndarray:
    return np.stack([b & 15, b >> 4], axis=2).reshape(b.shape[0], -1)[:, :n]


class _TableCodec(Codec):
    group = 2

    def _body(self, rows: int, cols: int) -> int:
        raise NotImplementedError

    def nbytes(self, rows: int, cols: int) -> int:
        return rows * self._body(1, cols) + 4 * rows

    def _scales(self, data: np.ndarray, rows: int, cols: int) -> np.ndarray:
        s = data[rows * self._body(1, cols) :].copy().view("<f4").astype(np.float32)
        return row_scales(s, rows, self.name)


class TL1(_TableCodec):
    name = "tl1"

    def _body(self, rows: int, cols: int) -> int:
        return rows * (-(-cols // 4))

    def pack(self, codes: np.ndarray, scales: np.ndarray | float) -> np.ndarray:
        codes = check_codes(codes, self.name)
        s = row_scales(scales, codes.shape[0], self.name)
        c = (pad_cols(codes, 4) + 1).astype(np.uint8)
        idx = 3 * c[:, 0::2] + c[:, 1::2]
        return np.concatenate([_nibbles(idx).reshape(-1), s.astype("<f4").view(np.uint8)])

    def unpack(self, raw: np.ndarray, rows: int, cols: int) -> tuple[np.ndarray, np.ndarray]:
        data = self.raw_bytes(raw, rows, cols)
        per_row = -(-cols // 4)
        idx = _unnibble(data[: rows * per_row].reshape(rows, per_row), 2 * per_row)
        if (idx > 8).any():
            raise QuantizationError(f"{self.name}: invalid index > 8 in packed data")
        codes = np.stack([idx // 3, idx % 3], axis=2).reshape(rows, -1)[:, :cols]
        return (codes.astype(np.int8) - 1), self._scales(data, rows, cols)


class TL2(_TableCodec):
    name = "tl2"

    @staticmethod
    def _groups(cols: int) -> int:
        return -(-cols // 3)

    def _body(self, rows: int, cols: int) -> int:
        g = self._groups(cols)
        return rows * ((-(-g // 2)) + (-(-g // 8)))

    def pack(self, codes: np.ndarray, scales: np.ndarray | float) -> np.ndarray:
        codes = check_codes(codes, self.name)
        rows = codes.shape[0]
        s = row_scales(scales, rows, self.name)
        c = (pad_cols(codes, 3) + 1).astype(np.uint8)
        t = 9 * c[:, 0::3] + 3 * c[:, 1::3] + c[:, 2::3]
        sign = t > 13
        mag = np.where(sign, 26 - t, t).astype(np.uint8)
        signs = np.packbits(sign, axis=1, bitorder="little")
        body = np.concatenate([_nibbles(mag), signs], axis=1)
        return np.concatenate([body.reshape(-1), s.astype("<f4").view(np.uint8)])

    def unpack(self, raw: np.ndarray, rows: int, cols: int) -> tuple[np.ndarray, np.ndarray]:
        data = self.raw_bytes(raw, rows, cols)
        g = self._groups(cols)
        nib, sgn = -(-g // 2), -(-g // 8)
        body = data[: rows * (nib + sgn)].reshape(rows, nib + sgn)
        mag = _unnibble(body[:, :nib], g)
        if (mag > 13).any():
            raise QuantizationError(f"{self.name}: invalid index > 13 in packed data")
        sign = np.unpackbits(body[:, nib:], axis=1, count=g, bitorder="little").astype(bool)
        t = np.where(sign, 26 - mag.astype(np.int16), mag.astype(np.int16))
        codes = np.stack([t // 9, (t // 3) % 3, t % 3], axis=2).reshape(rows, -1)[:, :cols]
        return (codes.astype(np.int8) - 1), self._scales(data, rows, cols)
