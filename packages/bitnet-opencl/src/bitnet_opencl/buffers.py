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

import threading
from typing import Any

import numpy as np

from bitnet_core.sdk.arrays import DeviceArray, reshaped
from bitnet_core.sdk.pool import FreeLists
from bitnet_core.sdk.pool import size_class as _size_class

SLACK = 64
#: Cached free bytes above which released buffers are freed instead of kept.
DEFAULT_POOL_LIMIT = 1 << 30


def size_class(nbytes: int) -> int:
    """The SDK's size class of ``nbytes`` plus ``SLACK``."""
    return _size_class(int(nbytes) + SLACK)


class BufferPool(FreeLists):
    """OpenCL buffers in the SDK's free lists, by size class (``misses`` are allocations)."""

    def __init__(self, cl: Any, ctx: Any, limit: int = DEFAULT_POOL_LIMIT) -> None:
        super().__init__(limit)
        self._cl = cl
        self._ctx = ctx
        self._lock = threading.Lock()

    def acquire(self, nbytes: int) -> _Block:
        size = size_class(nbytes)
        self.collect()
        with self._lock:
            buf = self.take(size)
        if buf is None:
            buf = self._cl.Buffer(self._ctx, self._cl.mem_flags.READ_WRITE, size)
        return _Block(buf, size, self)

    def release(self, buf: Any, size: int) -> None:
        """Give ``buf`` back from a finalizer: queued (see ``FreeLists``), and kept at once
        when the lock is free; when it is held (another thread, or this one: the collector
        can run this inside ``acquire``) the next ``acquire`` keeps it."""
        self.give_later(size, buf, size)
        if not self._lock.acquire(blocking=False):
            return
        try:
            dropped = self.settle()
        finally:
            self._lock.release()
        for b in dropped:
            b.release()

    def collect(self) -> None:
        """Keep the buffers finalizers gave back since the last call (freeing any over the limit)."""
        with self._lock:
            dropped = self.settle()
        for b in dropped:
            b.release()

    def clear(self) -> None:
        with self._lock:
            dropped = self.drain()
        for b in dropped:
            b.release()


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


class CLArray(DeviceArray):
    """A contiguous array on an OpenCL device (what ``OpenCLProvider`` ops take and return)."""

    __slots__ = ("_block", "__weakref__")

    def __init__(self, block: _Block, shape: tuple[int, ...], dtype: Any) -> None:
        self._block = block
        # fast path for the provider's own calls (a tuple of ints, a np.dtype)
        self.shape = shape if type(shape) is tuple else tuple(int(s) for s in shape)
        self.dtype = dtype if isinstance(dtype, np.dtype) else np.dtype(dtype)

    @property
    def buffer(self) -> Any:
        return self._block.buffer

    def reshape(self, *shape: Any) -> CLArray:
        """A view with another shape over the same buffer (one dimension may be -1)."""
        return CLArray(self._block, reshaped(self.shape, shape), self.dtype)
