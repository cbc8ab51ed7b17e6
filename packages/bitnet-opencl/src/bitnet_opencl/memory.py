"""The memory role of the OpenCL backend: device arrays from the pool, host copies, weights.

``OpenCLMemory`` is the part of ``OpenCLProvider`` that moves data: the
protocol's memory ops (``to_device``, ``to_host``, ``empty``, ``reshape``,
``load_ternary``), the allocation helpers the op launches use, and the rope
tables built on the host. It needs ``self.runtime`` (``runtime.Runtime``).
"""

from __future__ import annotations

import functools
import math
from typing import Any

import numpy as np

from bitnet_core.errors import (
    BitnetError,
    ProviderError,
    ShapeError,
    UnsupportedOperationError,
)
from bitnet_core.hal.weights import TernaryWeight
from bitnet_core.sdk.runtime import RuntimeUnavailable

from .buffers import CLArray
from .runtime.devices import import_pyopencl
from .weights import OpenCLWeight, host_layout

#: Host arrays up to this size are uploaded without blocking (after a private copy).
ASYNC_UPLOAD_BYTES = 1 << 20
_F32 = np.dtype(np.float32)

_HOST_DTYPES = {
    np.dtype(np.float32): np.float32,
    np.dtype(np.float64): np.float32,
    np.dtype(np.float16): np.float16,
    np.dtype(np.int8): np.int8,
    np.dtype(np.uint8): np.uint8,
    np.dtype(np.bool_): np.uint8,
    np.dtype(np.int32): np.int32,
    np.dtype(np.int64): np.int32,
    np.dtype(np.uint32): np.uint32,
}


def _is_cl_error(exc: BaseException) -> bool:
    try:
        return isinstance(exc, import_pyopencl().Error)
    except RuntimeUnavailable:
        return False


def cl_op(fn):
    """Turn an OpenCL failure inside an op into ``ProviderError("opencl <op>: ...")``."""

    @functools.wraps(fn)
    def wrapper(self, *args, **kwargs):
        try:
            return fn(self, *args, **kwargs)
        except BitnetError:
            raise
        except Exception as exc:
            if _is_cl_error(exc) or isinstance(exc, MemoryError):
                raise ProviderError(f"opencl {fn.__name__}: {type(exc).__name__}: {exc}") from exc
            raise

    return wrapper


class OpenCLMemory:
    """The memory ops and helpers of ``OpenCLProvider`` (see the module docstring)."""

    def memory_stats(self) -> dict[str, int]:
        pool = self.runtime.pool
        pool.collect()
        return {
            "allocations": pool.misses,
            "reuses": pool.hits,
            "cached_bytes": pool.cached_bytes,
        }

    def _alloc(self, shape: tuple[int, ...], dtype: Any = _F32) -> CLArray:
        dtype = dtype if isinstance(dtype, np.dtype) else np.dtype(dtype)
        nbytes = math.prod(shape) * dtype.itemsize
        return CLArray(self.runtime.pool.acquire(nbytes), tuple(shape), dtype)

    def _dev(self, x: Any, what: str, dtype: Any = np.float32) -> CLArray:
        """A ``CLArray`` of ``dtype`` (uploading a host array; checking a device one)."""
        if not isinstance(x, CLArray):
            x = self.to_device(np.asarray(x, dtype=dtype))
        if x.dtype != np.dtype(dtype):
            raise UnsupportedOperationError(
                f"opencl {what}: expects {np.dtype(dtype).name} arrays, got {x.dtype.name}"
            )
        return x

    def _local(self, nbytes: int) -> Any:
        """A local-memory kernel argument of ``nbytes`` (descriptors are reused)."""
        nbytes = max(4, int(nbytes))
        mem = self._locals.get(nbytes)
        if mem is None:
            mem = self._locals[nbytes] = self.runtime.cl.LocalMemory(nbytes)
        return mem

    @cl_op
    def to_device(self, array: Any) -> CLArray:
        if isinstance(array, CLArray):
            return array
        host = np.asarray(array)
        target = _HOST_DTYPES.get(host.dtype)
        if target is None:
            raise UnsupportedOperationError(f"opencl to_device: dtype {host.dtype} not supported")
        if (
            host.dtype == np.int64
            and host.size
            and (host.min() < np.iinfo(np.int32).min or host.max() > np.iinfo(np.int32).max)
        ):
            raise UnsupportedOperationError("opencl to_device: int64 values exceed int32")
        small = host.nbytes <= ASYNC_UPLOAD_BYTES
        # small arrays (token ids, rope tables, norms) are copied to a private
        # host array and uploaded without waiting for the queue to drain
        host = np.array(host, dtype=target, order="C", copy=True) if small else (
            np.ascontiguousarray(host, dtype=target)
        )  # fmt: skip
        out = self._alloc(host.shape, host.dtype)
        if host.size:
            rt = self.runtime
            evt = rt.cl.enqueue_copy(rt.queue, out.buffer, host, is_blocking=not small)
            if small:
                out._block.pending = evt
            self.trace.submit()
        return out

    @cl_op
    def to_host(self, array: Any) -> np.ndarray:
        if not isinstance(array, CLArray):
            return np.asarray(array)
        out = np.empty(array.shape, dtype=array.dtype)
        if out.size:
            self.runtime.cl.enqueue_copy(self.runtime.queue, out, array.buffer, is_blocking=True)
            self.trace.submit()
        return out

    @cl_op
    def empty(self, shape: tuple[int, ...], dtype: Any = np.float32) -> CLArray:
        shape = (int(shape),) if np.isscalar(shape) else tuple(int(s) for s in shape)
        if any(s < 0 for s in shape):
            raise ShapeError(f"opencl empty: negative dimension in {shape}")
        dtype = np.dtype(dtype)
        if dtype not in _HOST_DTYPES or _HOST_DTYPES[dtype] != dtype.type:
            raise UnsupportedOperationError(f"opencl empty: dtype {dtype} not supported")
        out = self._alloc(shape, dtype)
        rt = self.runtime
        rt.cl.enqueue_fill_buffer(rt.queue, out.buffer, np.uint8(0), 0, out._block.size)
        self.trace.submit()
        return out

    def reshape(self, array: Any, shape: tuple[int, ...]) -> CLArray:
        """A row-major view of ``array`` with another shape (same buffer, no copy)."""
        if not isinstance(array, CLArray):
            array = self.to_device(np.asarray(array))
        return array.reshape(tuple(shape))

    @cl_op
    def load_ternary(self, weight: TernaryWeight) -> OpenCLWeight:
        packed, scales = host_layout(weight)
        rt = self.runtime
        cl = rt.cl
        flags = cl.mem_flags.READ_ONLY | cl.mem_flags.COPY_HOST_PTR
        if packed.size == 0:  # zero rows: OpenCL has no empty buffers
            packed, scales = np.zeros(16, np.uint8), np.zeros(1, np.float32)
        return OpenCLWeight(
            weight.name,
            weight.rows,
            weight.cols,
            cl.Buffer(rt.context, flags, hostbuf=packed),
            cl.Buffer(rt.context, flags, hostbuf=scales),
        )

    def _check_weight(self, weight: Any, what: str) -> OpenCLWeight:
        if not isinstance(weight, OpenCLWeight):
            if isinstance(weight, TernaryWeight):
                return self.load_ternary(weight)
            raise UnsupportedOperationError(
                f"opencl {what}: weight must come from load_ternary, got {type(weight).__name__}"
            )
        return weight

    def _rope_table(self, positions: np.ndarray, theta: float, rot_dim: int) -> tuple[CLArray, int]:
        """``(table, pos0)``: cos/sin rows for ``positions`` start at row ``pos0``.

        Ascending runs of positions (every prefill and decode step) index one
        table of positions ``0..P`` per (theta, rot_dim), grown by doubling, so a
        decode step uploads nothing; other position sets get a table of their own.
        The angles are float64 on the host, as in the reference."""
        half = rot_dim // 2
        inv_freq = float(theta) ** (-np.arange(half, dtype=np.float64) * 2.0 / rot_dim)

        def upload(pos: np.ndarray) -> CLArray:
            ang = pos.astype(np.float64)[:, None] * inv_freq[None, :]
            return self.to_device(np.stack([np.cos(ang), np.sin(ang)], axis=-1).astype(np.float32))

        p0 = int(positions[0]) if positions.size else 0
        contiguous = positions.size > 0 and p0 >= 0 and bool(np.all(np.diff(positions) == 1))
        if contiguous:
            key = ("range", float(theta), int(rot_dim))
            need = p0 + positions.size
            table = self._rope_tables.get(key)
            if table is None or table.shape[0] < need:
                size = max(need, 2 * (table.shape[0] if table is not None else 256))
                table = upload(np.arange(size))
                self._rope_tables[key] = table
            return table, p0
        key = (positions.tobytes(), float(theta), int(rot_dim))
        table = self._rope_tables.get(key)
        if table is None:
            table = upload(positions)
            self._rope_tables[key] = table
            if len(self._rope_tables) > 16:
                self._rope_tables.popitem(last=False)
        self._rope_tables.move_to_end(key)
        return table, 0
