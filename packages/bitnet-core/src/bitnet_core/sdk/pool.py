"""Device memory pooling every backend shares: the size-class rule and keyed free lists.

``size_class`` rounds a request up by at most 1/8, so sizes within 1/8 of
each other share buffers (at most 12.5% waste, few distinct sizes).
``FreeLists`` keeps released buffers by key (a size class, an exact size, a
shape and dtype) under a byte limit, oldest dropped first; what it drops or
refuses goes back to the caller to free on its device.

A finalizer (``__del__``) that returns a buffer uses ``give_later``: the
garbage collector runs finalizers at any allocation, also in the middle of
``take`` or ``give`` on the same thread, where taking the pool's lock would
deadlock and changing the lists would corrupt them. ``give_later`` only
queues; ``settle`` (called by ``give`` and ``trim``, by a pool before
``take``, and by the finalizer itself once it knows no other call is under
way) moves the queue into the lists.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Hashable
from typing import Any

#: the smallest size class
MIN_CLASS = 256


def size_class(nbytes: int) -> int:
    """``nbytes`` rounded up to a multiple of 1/16 of its power of two (at least ``MIN_CLASS``)."""
    n = max(int(nbytes), MIN_CLASS)
    step = 1 << max(n.bit_length() - 4, 0)
    return (n + step - 1) // step * step


class FreeLists:
    """Released buffers by key, with hit/miss counters and a limit on the bytes kept.

    ``limit``: cached bytes kept at most (``None``: no limit); ``max_item``:
    buffers larger than this are never kept.
    """

    def __init__(self, limit: int | None = None, max_item: int | None = None) -> None:
        self.limit = limit
        self.max_item = max_item
        self._free: dict[Hashable, list[tuple[Any, int]]] = {}
        self._order: dict[int, Hashable] = {}  # id(buffer) -> key, oldest release first
        self._returned: deque[tuple[Hashable, Any, int]] = deque()  # from finalizers
        self.cached_bytes = 0
        self.hits = 0
        self.misses = 0
        self.evicted = 0

    def take(self, key: Hashable) -> Any | None:
        """A cached buffer of ``key`` (a hit), or None (a miss: allocate one)."""
        free = self._free.get(key)
        if not free:
            self.misses += 1
            return None
        buf, nbytes = free.pop()
        del self._order[id(buf)]
        self.cached_bytes -= nbytes
        self.hits += 1
        return buf

    def give_later(self, key: Hashable, buf: Any, nbytes: int) -> None:
        """``give`` from a finalizer: queued (an atomic append), kept at the next ``settle``."""
        self._returned.append((key, buf, nbytes))

    def settle(self) -> list[Any]:
        """Keep the buffers ``give_later`` queued; returns those to free now (as ``give``)."""
        dropped: list[Any] = []
        while self._returned:
            key, buf, nbytes = self._returned.popleft()
            dropped += self._keep(key, buf, nbytes)
        return dropped

    def give(self, key: Hashable, buf: Any, nbytes: int) -> list[Any]:
        """Keep ``buf`` for reuse; returns the buffers to free now (``buf`` itself when it
        does not fit, or the oldest cached ones dropped to make room)."""
        return self.settle() + self._keep(key, buf, nbytes)

    def _keep(self, key: Hashable, buf: Any, nbytes: int) -> list[Any]:
        if self.max_item is not None and nbytes > self.max_item:
            return [buf]
        if self.limit is not None and nbytes > self.limit:
            return [buf]
        self._free.setdefault(key, []).append((buf, nbytes))
        self._order[id(buf)] = key
        self.cached_bytes += nbytes
        return self._trim(self.limit) if self.limit is not None else []

    def trim(self, max_bytes: int = 0) -> list[Any]:
        """Drop cached buffers, oldest first, until at most ``max_bytes`` remain; returns them."""
        return self.settle() + self._trim(max_bytes)

    def _trim(self, max_bytes: int) -> list[Any]:
        dropped = []
        while self.cached_bytes > max_bytes and self._order:
            ident, key = next(iter(self._order.items()))
            del self._order[ident]
            free = self._free[key]
            idx = next(i for i, (b, _) in enumerate(free) if id(b) == ident)
            buf, nbytes = free.pop(idx)
            self.cached_bytes -= nbytes
            self.evicted += 1
            dropped.append(buf)
        return dropped

    def drain(self) -> list[Any]:
        """Every cached buffer, forgotten here (to free them all)."""
        return self.trim(-1)
