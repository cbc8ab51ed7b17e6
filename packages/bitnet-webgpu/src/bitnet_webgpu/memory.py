"""The memory role of the WebGPU backend: device arrays, host copies, resident weights.

``GpuArray`` and ``GpuTernary`` are what the provider's ops take and return;
``WebGPUMemory`` is the part of ``WebGPUProvider`` that moves data (the
protocol's memory ops and the helpers the op launches use). It needs
``self.dev`` (``runtime.Device``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from bitnet_core.errors import ShapeError, UnsupportedOperationError
from bitnet_core.hal.weights import TernaryWeight
from bitnet_core.sdk.packing import PACKINGS

from .runtime import BufferRange


@dataclass(eq=False)
class GpuArray:
    """A device array: a storage buffer plus its logical shape and kind.

    kinds: ``f32``, ``i32``, ``f16`` (a 2-D table stored as u32 pairs, rows padded
    to an even length, ``row_words`` u32 a row; with ``row_words`` 0, halves back to
    back: a float16 KV cache), ``q8`` (int8 packed four to a u32, rows padded to 16
    values, with ``xsum`` the per-row sums).
    """

    buffer: Any
    shape: tuple[int, ...]
    kind: str
    row_words: int = 0
    xsum: Any = None
    #: a table larger than one binding: rows bound per range (a multiple of 64), else 0
    chunk_rows: int = 0

    @property
    def size(self) -> int:
        return math.prod(self.shape)


@dataclass(eq=False)
class GpuTernary:
    """A ternary weight resident on the device: 16 codes per u32, per-row scales."""

    words: Any
    scales: Any
    rows: int
    cols: int
    kw16: int
    host: TernaryWeight


class WebGPUMemory:
    """The memory ops and helpers of ``WebGPUProvider`` (see the module docstring)."""

    def to_device(self, array: np.ndarray) -> GpuArray:
        a = np.asarray(array)
        if a.dtype == np.float16 and a.ndim != 2:  # a float16 KV cache: halves back to back
            return GpuArray(self.dev.upload(a.reshape(-1), "f16 array"), a.shape, "f16")
        if a.dtype == np.float16 and a.ndim == 2:
            rows, cols = a.shape
            even = cols + (cols % 2)
            padded = np.zeros((rows, even), dtype=np.float16)
            padded[:, :cols] = a
            return self._table(padded, a.shape, "f16", even // 2, "f16 table")
        if a.dtype == np.int8 and a.ndim == 2:
            return self._upload_q8(a)
        if np.issubdtype(a.dtype, np.integer):
            return GpuArray(self.dev.upload(a.astype(np.int32), "int array"), a.shape, "i32")
        a32 = np.ascontiguousarray(a, dtype=np.float32)
        if a32.ndim == 2:
            return self._table(a32, a.shape, "f32", a32.shape[1], "array")
        return GpuArray(self.dev.upload(a32, "array"), a.shape, "f32")

    def _table(
        self, host: np.ndarray, shape: tuple[int, ...], kind: str, row_words: int, what: str
    ) -> GpuArray:
        """A 2-D array; one larger than a storage binding (a 128k-token embedding table on
        an adapter with the 128 MiB default) is bound in ranges of ``chunk_rows`` rows."""
        row_bytes = max(1, row_words) * 4
        chunk = 0
        if shape[0] * row_bytes > self.dev.max_binding:
            chunk = self.dev.max_binding // row_bytes // 64 * 64
            if not chunk:
                self.dev.check_size(64 * row_bytes, f"{what} (64 rows)")
        buf = self.dev.upload(host, what, bound_whole=not chunk)
        return GpuArray(buf, tuple(shape), kind, row_words=row_words, chunk_rows=chunk)

    def table_ranges(self, table: GpuArray) -> list[tuple[int, int, Any]]:
        """``(first row, rows, binding)`` of each range of ``table`` (one: the whole buffer)."""
        rows = table.shape[0]
        if not table.chunk_rows:
            return [(0, rows, table.buffer)]
        row_bytes = table.row_words * 4
        return [
            (
                r,
                min(table.chunk_rows, rows - r),
                BufferRange(
                    table.buffer, r * row_bytes, min(table.chunk_rows, rows - r) * row_bytes
                ),
            )
            for r in range(0, rows, table.chunk_rows)
        ]

    def _upload_q8(self, xq: np.ndarray) -> GpuArray:
        t, k = xq.shape
        kw = max(1, -(-k // 16)) * 4
        padded = np.zeros((t, kw * 4), dtype=np.int8)
        padded[:, :k] = xq
        xsum = xq.astype(np.int32).sum(axis=1, dtype=np.int32)
        return GpuArray(
            self.dev.upload(padded, "int8 activations"),
            (t, k),
            "q8",
            row_words=kw,
            xsum=self.dev.upload(xsum, "activation sums"),
        )

    def to_host(self, array: Any) -> np.ndarray:
        if not isinstance(array, GpuArray):
            return np.asarray(array)
        if array.kind == "q8":
            t, k = array.shape
            raw = self.dev.read(array.buffer, t * array.row_words * 4)
            return raw.view(np.int8).reshape(t, array.row_words * 4)[:, :k].copy()
        if array.kind == "f16" and not array.row_words:
            raw = self.dev.read(array.buffer, array.size * 2)
            return raw.view(np.float16).reshape(array.shape).copy()
        if array.kind == "f16":
            rows, cols = array.shape
            raw = self.dev.read(array.buffer, rows * array.row_words * 4)
            return raw.view(np.float16).reshape(rows, -1)[:, :cols].copy()
        dtype = np.int32 if array.kind == "i32" else np.float32
        raw = self.dev.read(array.buffer, array.size * 4)
        return raw.view(dtype).reshape(array.shape).copy()

    def empty(self, shape: tuple[int, ...], dtype: Any = np.float32) -> GpuArray:
        n = math.prod(shape)
        if np.dtype(dtype) == np.dtype(np.float16):  # KV caches: halves back to back
            return GpuArray(self.dev.buffer(-(-n // 2) * 4, "f16 array"), tuple(shape), "f16")
        kind = "i32" if np.issubdtype(np.dtype(dtype), np.integer) else "f32"
        if np.dtype(dtype) not in (np.dtype(np.float32), np.dtype(np.int32)):
            raise UnsupportedOperationError(
                f"webgpu: empty() supports float32/float16/int32, not {dtype}"
            )
        return GpuArray(self.dev.buffer(n * 4, "array"), tuple(shape), kind)

    def reshape(self, array: GpuArray, shape: tuple[int, ...]) -> GpuArray:
        """A view of the same buffer with another row-major shape (f32/i32 arrays)."""
        if not isinstance(array, GpuArray) or array.kind not in ("f32", "i32"):
            raise UnsupportedOperationError("webgpu: reshape works on float32/int32 device arrays")
        if math.prod(shape) != array.size:
            raise ShapeError(f"reshape: {array.shape} cannot become {tuple(shape)}")
        return GpuArray(array.buffer, tuple(shape), array.kind)

    def _new(self, shape: tuple[int, ...], what: str = "activations") -> GpuArray:
        return GpuArray(self.dev.buffer(math.prod(shape) * 4, what), tuple(shape), "f32")

    def load_ternary(self, weight: TernaryWeight) -> GpuTernary:
        codes, scales = weight.unpack()
        words = PACKINGS["i2_lanes"].pack(codes)  # rows padded to 16 columns
        return GpuTernary(
            words=self.dev.upload(words, f"ternary weight {weight.name}"),
            scales=self.dev.upload(scales.astype(np.float32), "weight scales"),
            rows=weight.rows,
            cols=weight.cols,
            kw16=words.shape[1],
            host=weight,
        )

    def _f32(self, x: Any) -> GpuArray:
        if isinstance(x, GpuArray):
            if x.kind != "f32":
                raise UnsupportedOperationError(f"webgpu: expected a float32 array, got {x.kind}")
            if x.chunk_rows:
                raise UnsupportedOperationError(
                    f"webgpu: a {x.shape} array exceeds one storage binding; only embedding "
                    "and matmul_dense read such a table"
                )
            return x
        return self.to_device(np.asarray(x, dtype=np.float32))
