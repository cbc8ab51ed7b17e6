"""F32 / F16 / BF16 weights read as ternary (absmean at load).

``unpack`` ternarizes the float matrix with :func:`ternarize_rows` over the
whole tensor (exact per-row scales when it is already ternary); ``pack``
writes ``codes * scales`` in the float type.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .absmean import ternarize_rows
from .base import Codec, check_codes, row_scales


def bf16_to_f32(u16: np.ndarray) -> np.ndarray:
    """bfloat16 bit patterns (uint16) -> float32."""
    return (np.asarray(u16, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)


def f32_to_bf16(x: np.ndarray) -> np.ndarray:
    """float32 -> bfloat16 bit patterns (uint16), round to nearest even (NaN kept NaN)."""
    u = np.asarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    nan = np.isnan(np.asarray(x, dtype=np.float32))
    return np.where(nan, np.uint16(0x7FC0), r).astype(np.uint16)


class BF16Array:
    """A bfloat16 table kept as its uint16 bit patterns (numpy has no bfloat16 dtype).

    ``ModelWeights`` holds BF16 embedding/output tables this way, as a view of
    the mapped file, so a provider that computes on bfloat16 (``table_dtypes``)
    gets them at two bytes a value. ``np.asarray`` (and ``to_float32``) widens
    to float32 exactly, for everything that wants floats.
    """

    dtype_name = "bfloat16"

    def __init__(self, bits: np.ndarray) -> None:
        bits = np.asarray(bits)
        if bits.dtype != np.dtype("<u2"):
            raise TypeError(f"BF16Array: expected uint16 bit patterns, got {bits.dtype}")
        self.bits = bits

    @classmethod
    def from_float(cls, values: np.ndarray) -> BF16Array:
        """Round float values to bfloat16 (nearest even)."""
        return cls(f32_to_bf16(values).reshape(np.shape(values)))

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.bits.shape)

    @property
    def ndim(self) -> int:
        return self.bits.ndim

    @property
    def nbytes(self) -> int:
        return int(self.bits.nbytes)

    def reshape(self, *shape: Any) -> BF16Array:
        return BF16Array(self.bits.reshape(*shape))

    def to_float32(self) -> np.ndarray:
        return bf16_to_f32(self.bits).reshape(self.shape)

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        out = self.to_float32()
        return out if dtype is None else out.astype(dtype)

    def __repr__(self) -> str:
        return f"BF16Array(shape={self.shape})"


class DenseCodec(Codec):
    """A float matrix quantized to ternary when unpacked."""

    def __init__(self, name: str, ggml_type: int, itemsize: int) -> None:
        self.name = name
        self.ggml_type = ggml_type
        self.itemsize = itemsize

    def nbytes(self, rows: int, cols: int) -> int:
        return rows * cols * self.itemsize

    def to_float(self, raw: np.ndarray, rows: int, cols: int) -> np.ndarray:
        data = self.raw_bytes(raw, rows, cols)
        if self.name == "bf16":
            return bf16_to_f32(data.view("<u2")).reshape(rows, cols)
        dtype = "<f4" if self.name == "f32" else "<f2"
        return data.view(dtype).astype(np.float32).reshape(rows, cols)

    def pack(self, codes: np.ndarray, scales: np.ndarray | float) -> np.ndarray:
        codes = check_codes(codes, self.name)
        s = row_scales(scales, codes.shape[0], self.name)
        values = codes.astype(np.float32) * s[:, None]
        if self.name == "bf16":
            return f32_to_bf16(values).view(np.uint8).reshape(-1)
        dtype = "<f4" if self.name == "f32" else "<f2"
        return values.astype(dtype).view(np.uint8).reshape(-1)

    def unpack(self, raw: np.ndarray, rows: int, cols: int) -> tuple[np.ndarray, np.ndarray]:
        return ternarize_rows(self.to_float(raw, rows, cols), per_row=False)


F32 = DenseCodec("f32", 0, 4)
F16 = DenseCodec("f16", 1, 2)
BF16 = DenseCodec("bf16", 30, 2)
