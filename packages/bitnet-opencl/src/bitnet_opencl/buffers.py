"""Device arrays and the buffer pool they come from.

A ``CLArray`` is an OpenCL buffer with a shape and a dtype, row-major and
contiguous; ``reshape`` gives a view over the same buffer. When the last
array over a buffer goes away the buffer returns to its ``BufferPool``,
which hands it to the next request of the same size class. Every operation
runs on one in-order queue, so a buffer handed out again is only written
after every command that read it before.

Every pooled buffer has ``SLACK`` bytes past the array's end: the int8
matrix kernels read whole 64-byte blocks of a row.
"""

from __future__ import annotations

import math
import threading
from collections import defaultdict
from typing import Any

import numpy as np

from bitnet_core.errors import ShapeError

SLACK = 64
#: Cached free bytes above which released buffers are freed instead of kept.
DEFAULT_POOL_LIMIT = 1 << 30


def size_class(nbytes: int) -> int:
    """Round up so sizes within 1/8 of each other share buffers (at most 12.5% waste)."""
    n = max(int(nbytes) + SLACK, 256)
    if n <= 4096:
        return (n + 255) // 256 * 256
    step = 1 << (n.bit_length() - 4)
    return (n + step - 1) // step * step


class BufferPool:
    """Free lists of OpenCL buffers by size class."""

    def __init__(self, cl: Any, ctx: Any, limit: int = DEFAULT_POOL_LIMIT) -> None:
        self._cl = cl
        self._ctx = ctx
        self._free: dict[int, list[Any]] = defaultdict(list)
        self._lock = threading.Lock()
        self.limit = limit
        self.cached_bytes = 0
        self.allocations = 0
        self.reuses = 0

    def acquire(self, nbytes: int) -> _Block:
        size = size_class(nbytes)
        with self._lock:
            free = self._free.get(size)
            if free:
                self.cached_bytes -= size
                self.reuses += 1
                return _Block(free.pop(), size, self)
        self.allocations += 1
        buf = self._cl.Buffer(self._ctx, self._cl.mem_flags.READ_WRITE, size)
        return _Block(buf, size, self)

    def release(self, buf: Any, size: int) -> None:
        with self._lock:
            if self.cached_bytes + size <= self.limit:
                self._free[size].append(buf)
                self.cached_bytes += size
                return
        buf.release()

    def clear(self) -> None:
        with self._lock:
            for bufs in self._free.values():
                for b in bufs:
                    b.release()
            self._free.clear()
            self.cached_bytes = 0


class _Block:
    """Owns one pooled buffer; gives it back when garbage-collected."""

    __slots__ = ("buffer", "size", "_pool", "pending")

    def __init__(self, buffer: Any, size: int, pool: BufferPool | None) -> None:
        self.buffer = buffer
        self.size = size
        self._pool = pool
        #: an in-flight host-to-device copy (PyOpenCL's NannyEvent keeps its host
        #: array alive and waits for it when dropped)
        self.pending: Any = None

    def __del__(self) -> None:
        # no module globals here: at interpreter shutdown they may already be None
        pool, self._pool = self._pool, None
        try:  # noqa: SIM105
            self.pending = None
            if pool is not None:
                pool.release(self.buffer, self.size)
        except Exception:  # the context is going away anyway
            pass


class CLArray:
    """A contiguous array on an OpenCL device (what ``OpenCLProvider`` ops take and return)."""

    __slots__ = ("_block", "shape", "dtype", "__weakref__")

    def __init__(self, block: _Block, shape: tuple[int, ...], dtype: Any) -> None:
        self._block = block
        # fast path for the provider's own calls (a tuple of ints, a np.dtype)
        self.shape = shape if type(shape) is tuple else tuple(int(s) for s in shape)
        self.dtype = dtype if isinstance(dtype, np.dtype) else np.dtype(dtype)

    @property
    def buffer(self) -> Any:
        return self._block.buffer

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
            raise TypeError("len() of a 0-d CLArray")
        return self.shape[0]

    def reshape(self, *shape: Any) -> CLArray:
        """A view with another shape over the same buffer (one dimension may be -1)."""
        if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
            shape = tuple(shape[0])
        dims = [int(s) for s in shape]
        if dims.count(-1) > 1:
            raise ShapeError(f"reshape {tuple(dims)}: at most one dimension may be -1")
        if -1 in dims:
            known = math.prod(d for d in dims if d != -1)
            if known == 0 or self.size % known:
                raise ShapeError(f"cannot reshape {self.shape} to {tuple(dims)}")
            dims[dims.index(-1)] = self.size // known
        if math.prod(dims) != self.size or any(d < 0 for d in dims):
            raise ShapeError(f"cannot reshape {self.shape} to {tuple(dims)}")
        return CLArray(self._block, tuple(dims), self.dtype)

    def __repr__(self) -> str:
        return f"CLArray(shape={self.shape}, dtype={self.dtype})"
