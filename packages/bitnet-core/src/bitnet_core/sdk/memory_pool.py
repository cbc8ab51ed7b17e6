"""A device memory pool: reuse freed buffers by (shape, dtype), count hits, misses, peak bytes.

Provider-agnostic: it is given the function that allocates on the device
(``provider.empty`` or a CuPy/OpenCL allocator) and never looks inside the
arrays it hands out. The generic runner takes its KV cache buffers from one;
a GPU runner can use it for activations too.

A released buffer keeps its old contents: callers that need zeros clear it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from ..errors import ConfigError
from .pool import FreeLists

Allocate = Callable[[tuple[int, ...], Any], Any]


@dataclass
class PoolStats:
    """Counters of a :class:`MemoryPool` (bytes are what the pool asked the device for)."""

    hits: int = 0
    misses: int = 0
    releases: int = 0
    evicted_buffers: int = 0
    in_use_bytes: int = 0
    cached_bytes: int = 0
    peak_bytes: int = 0

    @property
    def total_bytes(self) -> int:
        return self.in_use_bytes + self.cached_bytes

    @property
    def hit_rate(self) -> float:
        n = self.hits + self.misses
        return self.hits / n if n else 0.0

    def as_dict(self) -> dict:
        d = asdict(self)
        d.update(total_bytes=self.total_bytes, hit_rate=self.hit_rate)
        return d


def _nbytes(shape: tuple[int, ...], dtype: Any) -> int:
    return int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize


class MemoryPool:
    """Size-keyed free lists over a device allocator.

    ``acquire(shape, dtype)`` returns a cached buffer of exactly that shape and
    dtype when one was released (a hit) or a new one from ``allocate`` (a
    miss). ``release(buf)`` gives it back. ``max_cached_bytes`` bounds the
    free lists: the oldest cached buffers are dropped (and ``free`` called on
    them, when given) to stay under it.
    """

    def __init__(
        self,
        allocate: Allocate,
        *,
        free: Callable[[Any], None] | None = None,
        max_cached_bytes: int | None = None,
    ) -> None:
        if max_cached_bytes is not None and max_cached_bytes < 0:
            raise ConfigError(f"memory pool: max_cached_bytes must be >= 0, got {max_cached_bytes}")
        self._allocate = allocate
        self._free = free
        self.max_cached_bytes = max_cached_bytes
        self._lists = FreeLists()  # by (shape, dtype); trimmed here, oldest first
        self._in_use: dict[int, tuple[tuple, int, Any]] = {}
        self.stats = PoolStats()

    @staticmethod
    def _key(shape: tuple[int, ...], dtype: Any) -> tuple:
        return tuple(int(s) for s in shape), np.dtype(dtype).str

    def acquire(self, shape: tuple[int, ...], dtype: Any = np.float32) -> Any:
        """A buffer of ``shape`` and ``dtype`` on the device (contents unspecified)."""
        key = self._key(shape, dtype)
        nbytes = _nbytes(key[0], dtype)
        buf = self._lists.take(key)
        if buf is not None:
            self.stats.hits += 1
            self.stats.cached_bytes -= nbytes
        else:
            buf = self._allocate(key[0], np.dtype(dtype))
            self.stats.misses += 1
        self._in_use[id(buf)] = (key, nbytes, buf)
        self.stats.in_use_bytes += nbytes
        self.stats.peak_bytes = max(self.stats.peak_bytes, self.stats.total_bytes)
        return buf

    def release(self, buf: Any) -> None:
        """Give a buffer from :meth:`acquire` back for reuse."""
        entry = self._in_use.pop(id(buf), None)
        if entry is None:
            raise ConfigError("memory pool: releasing a buffer this pool did not hand out")
        key, nbytes, _ = entry
        self.stats.releases += 1
        self.stats.in_use_bytes -= nbytes
        self._lists.give(key, buf, nbytes)
        self.stats.cached_bytes += nbytes
        if self.max_cached_bytes is not None:
            self.trim(self.max_cached_bytes)

    def trim(self, max_cached_bytes: int = 0) -> None:
        """Drop cached (free) buffers, oldest first, until at most ``max_cached_bytes`` remain."""
        for buf in self._lists.trim(max_cached_bytes):
            self.stats.evicted_buffers += 1
            if self._free is not None:
                self._free(buf)
        self.stats.cached_bytes = self._lists.cached_bytes

    @property
    def in_use(self) -> int:
        """Number of buffers handed out and not released."""
        return len(self._in_use)
