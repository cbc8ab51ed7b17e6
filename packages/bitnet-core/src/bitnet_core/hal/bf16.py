"""bfloat16 tables as providers receive them: ``BF16Array`` and the bit conversions.

numpy has no bfloat16 dtype, so a BF16 embedding or output table travels as
its uint16 bit patterns (``BF16Array``, a view of the mapped file). A provider
that lists ``"bfloat16"`` in ``table_dtypes`` gets it so from ``to_device``;
the others get it widened to float32 exactly.
"""

from __future__ import annotations

from typing import Any

import numpy as np


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
