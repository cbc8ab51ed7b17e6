"""``DeviceArray``: the shape bookkeeping of a backend's array type (the buffer is the backend's)."""

from __future__ import annotations

import math
from typing import Any

from ..errors import ShapeError


def reshaped(shape: tuple[int, ...], new: tuple[Any, ...]) -> tuple[int, ...]:
    """The dimensions ``reshape(*new)`` gives an array of ``shape`` (one ``-1`` allowed)."""
    if len(new) == 1 and isinstance(new[0], (tuple, list)):
        new = tuple(new[0])
    dims = [int(s) for s in new]
    size = math.prod(shape)
    if dims.count(-1) > 1:
        raise ShapeError(f"reshape {tuple(dims)}: at most one dimension may be -1")
    if -1 in dims:
        known = math.prod(d for d in dims if d != -1)
        if known == 0 or size % known:
            raise ShapeError(f"cannot reshape {shape} to {tuple(dims)}")
        dims[dims.index(-1)] = size // known
    if math.prod(dims) != size or any(d < 0 for d in dims):
        raise ShapeError(f"cannot reshape {shape} to {tuple(dims)}")
    return tuple(dims)


def row_split(shape: tuple[int, ...]) -> tuple[int, int]:
    """``(rows, cols)`` of an op over the last axis (``rmsnorm``, ``quantize_act``)."""
    cols = shape[-1] if shape else 1
    return (math.prod(shape) // cols if cols else 0), cols


class DeviceArray:
    """A row-major array on a device: ``shape``, ``dtype`` and what follows from them."""

    __slots__ = ("shape", "dtype")
    shape: tuple[int, ...]
    dtype: Any

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError(f"len() of a 0-d {type(self).__name__}")
        return self.shape[0]

    def __repr__(self) -> str:
        return f"{type(self).__name__}(shape={self.shape}, dtype={self.dtype})"
