"""The memory role of the Vulkan backend: device arrays, host copies, weights, host-built tables.

``VulkanMemory`` is the part of ``VulkanProvider`` that moves data: the
protocol's memory ops (``to_device``, ``to_host``, ``empty``, ``reshape``,
``load_ternary``), the helpers the op launches use to get device arrays, the
rope tables computed on the host and the one-word step values (a decode
step's position) that replayed steps read. It needs ``self.stream``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from bitnet_core.errors import ShapeError, UnsupportedOperationError
from bitnet_core.hal.weights import TernaryWeight
from bitnet_core.sdk.packing import PACKINGS

from .arrays import Lease, SplitTable, VulkanArray, VulkanWeight, device_nbytes, padded_cols

#: bytes of one part of a split table (None: the device's maxStorageBufferRange)
TABLE_PART_BYTES: int | None = None


class VulkanMemory:
    """The memory ops and helpers of ``VulkanProvider`` (see the module docstring)."""

    def _new(self, shape: tuple[int, ...], dtype: Any = np.float32) -> VulkanArray:
        dtype = np.dtype(dtype)
        buf = self.stream.acquire(device_nbytes(dtype, shape))
        return VulkanArray(Lease(self.stream, buf), shape, dtype)

    def _dev(self, x: Any, op: str, dtype: Any = np.float32) -> VulkanArray:
        """``x`` as a device array of ``dtype`` (host arrays are uploaded, for convenience)."""
        if not isinstance(x, VulkanArray):
            if isinstance(x, VulkanWeight):
                raise ShapeError(f"{op}: got a ternary weight where an array is expected")
            if isinstance(x, SplitTable):
                raise UnsupportedOperationError(
                    f"{op}: a table split across buffers is only for embedding/matmul_dense"
                )
            x = self.to_device(np.asarray(x, dtype=dtype))
        if x.dtype != np.dtype(dtype):
            raise UnsupportedOperationError(
                f"{op}: expects {np.dtype(dtype)} arrays, got {x.dtype}"
            )
        return x

    def _table(self, x: Any, op: str) -> VulkanArray | SplitTable:
        if isinstance(x, SplitTable):
            return x
        if not isinstance(x, VulkanArray):
            arr = np.asarray(x)
            x = self.to_device(arr if arr.dtype == np.float16 else arr.astype(np.float32))
        if x.dtype not in (np.float16, np.float32) or x.ndim != 2:
            raise UnsupportedOperationError(
                f"{op}: tables must be 2-D float16/float32, got {x.dtype} {x.shape}"
            )
        return x

    def to_device(self, array: np.ndarray) -> VulkanArray:
        """Upload a host array (float64 becomes float32; 1-D float16 too; int8 rows padded)."""
        a = np.asarray(array)
        if a.dtype == np.float64 or (a.dtype == np.float16 and a.ndim < 2):
            a = a.astype(np.float32)
        elif a.dtype == np.int64:
            a = a.astype(np.int32)
        elif a.dtype.kind not in "fiub":
            raise UnsupportedOperationError(f"to_device: unsupported dtype {a.dtype}")
        out_shape = a.shape
        if a.dtype == np.int8 and a.ndim == 2:
            padded = np.zeros((a.shape[0], padded_cols(a.dtype, a.shape)), dtype=np.int8)
            padded[:, : a.shape[1]] = a
            a = padded
        a = np.ascontiguousarray(a)
        stream = self.stream
        part_rows = self._table_part_rows(a)
        if part_rows:
            parts = [
                (r, self.to_device(a[r : r + part_rows])) for r in range(0, a.shape[0], part_rows)
            ]
            return SplitTable(parts, a.shape, a.dtype)
        if a.nbytes >= (1 << 20):  # big (weights, tables): a buffer of its own
            buf = stream.allocate_exact(a.nbytes)
        else:
            buf = stream.acquire(a.nbytes, host_write=True)
        stream.upload(buf, a)
        return VulkanArray(Lease(stream, buf), out_shape, a.dtype)

    def _table_part_rows(self, a: np.ndarray) -> int:
        """Rows a part of ``a`` when it is a float table too large for one buffer, else 0."""
        limit = TABLE_PART_BYTES or self.context.info.limits["max_storage_buffer_range"]
        if a.ndim != 2 or a.dtype.kind != "f" or a.nbytes <= limit or a.shape[1] == 0:
            return 0
        row = a.shape[1] * a.dtype.itemsize
        if row > limit:
            return 0  # a single row too large: the allocation's error says so
        return limit // row

    def to_host(self, array: Any) -> np.ndarray:
        """Download a device array (runs everything recorded so far)."""
        if isinstance(array, SplitTable):
            return np.concatenate([self.to_host(part) for _, part in array.parts])
        if not isinstance(array, VulkanArray):
            return np.asarray(array)
        raw = self.stream.download(array.buffer, array.nbytes)
        if array.dtype == np.int8 and array.ndim == 2:
            rows, cols = array.shape
            return (
                raw.view(np.int8)
                .reshape(rows, padded_cols(array.dtype, array.shape))[:, :cols]
                .copy()
            )
        return raw.view(array.dtype).reshape(array.shape)

    def empty(self, shape: tuple[int, ...], dtype: Any = np.float32) -> VulkanArray:
        """A zero-filled device array."""
        shape = tuple(int(s) for s in shape)
        out = self._new(shape, dtype)
        self.stream.fill_zero(out.buffer, out.nbytes)
        return out

    def reshape(self, x: VulkanArray, shape: tuple[int, ...]) -> VulkanArray:
        return self._dev(
            x, "reshape", x.dtype if isinstance(x, VulkanArray) else np.float32
        ).reshape(shape)

    def load_ternary(self, weight: TernaryWeight) -> VulkanWeight:
        """Upload in the SDK's ``"i2_rows"`` layout (16 codes a uint32 word) and scales."""
        rows, cols = int(weight.rows), int(weight.cols)
        codes, scales = weight.unpack()
        padded = PACKINGS["i2_rows"].pack(codes)
        words = padded.shape[1] // 4
        stream = self.stream
        wbuf = stream.allocate_exact(padded.nbytes)
        stream.upload(wbuf, padded)
        sbuf = stream.allocate_exact(max(rows, 1) * 4)
        stream.upload(sbuf, np.asarray(scales, dtype=np.float32))
        return VulkanWeight(
            weight.name, rows, cols, words, Lease(stream, wbuf), Lease(stream, sbuf)
        )

    def _rope_tables(
        self, positions: np.ndarray, theta: float, rot_dim: int
    ) -> tuple[VulkanArray, VulkanArray]:
        """cos/sin ``[T, rot_dim/2]`` in float64 on the host (q and k share the last ones)."""
        key = (positions.tobytes(), theta, rot_dim)
        if self._rope_cache is not None and self._rope_cache[0] == key:
            return self._rope_cache[1], self._rope_cache[2]
        half = rot_dim // 2
        inv_freq = theta ** (-np.arange(half, dtype=np.float64) * 2.0 / max(rot_dim, 1))
        ang = positions[:, None] * inv_freq[None, :]
        cos_t = self.to_device(np.cos(ang).astype(np.float32).reshape(-1) if half else np.zeros(1))
        sin_t = self.to_device(np.sin(ang).astype(np.float32).reshape(-1) if half else np.zeros(1))
        self._rope_cache = (key, cos_t, sin_t)
        return cos_t, sin_t

    def _step_value(self, value: int) -> VulkanArray:
        """``value`` in a one-word device buffer, shared by the ops of the open step."""
        epoch = self.stream.epoch
        if self._step_values.get("epoch") != epoch:
            self._step_values = {"epoch": epoch}
        found = self._step_values.get(value)
        if found is None:
            found = self._step_values[value] = self.to_device(np.array([value], np.uint32))
        return found
