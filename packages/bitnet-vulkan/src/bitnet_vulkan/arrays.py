"""Device arrays of the Vulkan provider: a buffer lease, a shape and a dtype.

Layout is numpy's row-major, except int8 matrices (quantized activations):
their rows are padded with zeros to a multiple of 16 bytes, so each row is a
whole number of the 16-column words the ternary matmul reads.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from bitnet_core.errors import ShapeError
from bitnet_core.sdk.arrays import DeviceArray, reshaped

from .runtime.context import Buffer

INT8_ROW_ALIGN = 16


class Lease:
    """Owns one buffer; gives it back to the stream's pool when the last array using it is gone."""

    __slots__ = ("stream", "buffer")

    def __init__(self, stream: Any, buffer: Buffer) -> None:
        self.stream = stream
        self.buffer = buffer

    def __del__(self) -> None:
        try:  # noqa: SIM105 (no imports in a finalizer at shutdown)
            self.stream.release(self.buffer)
        except Exception:  # interpreter shutdown, closed device: nothing left to give back to
            pass


def padded_cols(dtype: np.dtype, shape: tuple[int, ...]) -> int:
    """Elements a row occupies on the device (int8 matrices are padded, nothing else is)."""
    if dtype == np.int8 and len(shape) == 2:
        return -(-shape[1] // INT8_ROW_ALIGN) * INT8_ROW_ALIGN
    return shape[-1] if shape else 1


def device_nbytes(dtype: np.dtype, shape: tuple[int, ...]) -> int:
    if dtype == np.int8 and len(shape) == 2:
        return shape[0] * padded_cols(dtype, shape)
    return int(math.prod(shape)) * dtype.itemsize


class VulkanArray(DeviceArray):
    """An array resident in a Vulkan buffer (what the provider's ops take and return)."""

    __slots__ = ("lease",)

    def __init__(self, lease: Lease, shape: tuple[int, ...], dtype: Any) -> None:
        self.lease = lease
        self.shape = tuple(int(s) for s in shape)
        self.dtype = np.dtype(dtype)

    @property
    def buffer(self) -> Buffer:
        return self.lease.buffer

    @property
    def nbytes(self) -> int:
        return device_nbytes(self.dtype, self.shape)

    def reshape(self, *shape: Any) -> VulkanArray:
        """A view of the same buffer with another row-major shape (one ``-1`` allowed)."""
        dims = reshaped(self.shape, shape)
        if self.dtype == np.int8 and (self.ndim == 2 or len(dims) == 2) and dims != self.shape:
            raise ShapeError("int8 device matrices have padded rows and cannot be reshaped")
        return VulkanArray(self.lease, dims, self.dtype)


class SplitTable(DeviceArray):
    """A 2-D float table too large for one storage buffer: parts of whole rows, in order.

    Only ``embedding`` and ``matmul_dense`` take it (one dispatch a part).
    """

    __slots__ = ("parts",)

    def __init__(self, parts: list[tuple[int, VulkanArray]], shape: tuple[int, int], dtype: Any):
        self.parts = parts  # (first row, the part's rows as a table)
        self.shape = tuple(int(s) for s in shape)
        self.dtype = np.dtype(dtype)

    def reshape(self, *shape: Any) -> SplitTable:
        raise ShapeError("a table split across buffers cannot be reshaped")


class VulkanWeight:
    """A ternary matrix resident on the device: I2 codes as uint32 words and per-row scales."""

    __slots__ = ("name", "rows", "cols", "words_per_row", "codes", "scales")

    def __init__(
        self, name: str, rows: int, cols: int, words_per_row: int, codes: Lease, scales: Lease
    ) -> None:
        self.name = name
        self.rows = rows
        self.cols = cols
        self.words_per_row = words_per_row
        self.codes = codes
        self.scales = scales

    @property
    def shape(self) -> tuple[int, int]:
        return self.rows, self.cols

    def __repr__(self) -> str:
        return f"VulkanWeight({self.name!r}, {self.rows}x{self.cols})"
